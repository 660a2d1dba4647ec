/**
 * What a phase's effects receive on a `RedisStore` without `PostgresPhases`: a marker, since
 * Redis has no transaction that spans the application's effects.
 */

/**
 * The "transaction" a phase's effects receive on Redis: a marker, not a handle. Redis has no
 * transaction that spans the application's local effects and the store's write, so with
 * `RedisStore` a phase's recorded result is written AFTER its effects: if the process dies in
 * between, or the lease was lost meanwhile, the effects have happened and the phase runs again
 * on the next attempt. Make such effects idempotent themselves (an upsert keyed by the claim
 * id, or `execution.call` with the derived key for anything external). For atomic phases keep
 * the phase's data in PostgreSQL with `PostgresStore` (README, "Redis").
 */
export interface NoTransaction {
  /** Always `false`: effects and the recorded result are not one transaction. */
  readonly atomic: false;
}

/** The one {@link NoTransaction} value passed to every phase's effects. */
export const NO_TRANSACTION: NoTransaction = Object.freeze({ atomic: false as const });
