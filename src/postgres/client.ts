/**
 * The slice of a PostgreSQL client that idem uses, declared locally so that `pg` and PGlite
 * both fit without being imported (they are optional peer dependencies), and the
 * {@link SqlDriver} interface through which any other client (postgres.js, Drizzle, Kysely,
 * Prisma) runs idem's statements and hands a phase its own transaction.
 */

/** A query result: node-postgres fills `rowCount`, PGlite `affectedRows`. */
export interface QueryResultLike {
  rows: Array<Record<string, unknown>>;
  rowCount?: number | null;
  affectedRows?: number;
}

/** Anything that runs one parameterised statement: a pool, a client, a transaction. */
export interface Queryable {
  query(text: string, params?: unknown[]): Promise<QueryResultLike>;
}

/** A connection checked out of a pool (node-postgres `PoolClient`). */
export interface PoolClientLike extends Queryable {
  release(err?: Error | boolean): void;
}

/** A pool that hands out connections for transactions (node-postgres `Pool`). */
export interface PoolLike extends Queryable {
  connect(): Promise<PoolClientLike>;
  totalCount: number;
  /** Callers waiting for a connection (node-postgres `Pool#waitingCount`). */
  waitingCount?: number;
  /** The pool's settings (node-postgres keeps them here). */
  options?: { connectionTimeoutMillis?: number };
}

/** A client with its own transaction scope that rolls back on throw (PGlite). */
export interface TransactionalLike extends Queryable {
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
}

/** What the PostgreSQL store accepts as is: a `pg.Pool`, a PGlite instance, or anything shaped like either. */
export type SqlClient = PoolLike | TransactionalLike;

/** The brand of a {@link SqlDriver}. */
export const SQL_DRIVER = 'idem.sql-driver' as const;

/**
 * How idem runs its statements on a client it does not know by shape, and opens that client's
 * own transaction, so a phase's `tx` is the client's transaction object (postgres.js `sql`
 * inside `begin`, Drizzle's `tx`, Kysely's `Transaction`, Prisma's interactive client).
 * Made by a small factory per client (`postgresjs(sql)` in `idem/postgresjs`, …); write one
 * for another client the same way (docs/architecture.md, "Adding a database client").
 *
 * Results: `rows` carry the values node-postgres gives with its default parsers, since idem's
 * statements are written for them: `bytea` a Uint8Array (a Buffer is one), `json`/`jsonb`
 * parsed, `timestamptz` a Date, `int2`/`int4`/`float8` numbers, `bool` booleans, `int8` and
 * `numeric` strings. Parameters are `$1…` placeholders bound, never interpolated: strings,
 * finite numbers, booleans, `null` and Uint8Array (bound as `bytea`); JSON arrives as text.
 *
 * @typeParam Tx the client's own transaction object, handed to a phase's effects
 */
export interface SqlDriver<Tx> {
  /** Brand, so that a driver is told from a pg.Pool or PGlite without doubt. */
  readonly kind: typeof SQL_DRIVER;
  /** The client's name for errors and telemetry, e.g. `'postgres.js'`. */
  readonly name: string;
  /** Runs one of idem's statements on its own (autocommit); prepared where the client can. */
  query(text: string, params?: unknown[]): Promise<QueryResultLike>;
  /**
   * Opens a transaction on the client and calls `fn` with the client's own transaction object
   * `tx` (for the user's effects) and `sql`, a {@link Queryable} that runs idem's statements in
   * the SAME transaction (the fenced recovery-point write, protocol.md K4, K5, Q4). Commits
   * when `fn` resolves; rolls back and rethrows when it throws.
   */
  transaction<T>(fn: (tx: Tx, sql: Queryable) => Promise<T>): Promise<T>;
  /**
   * Optional, needed for `notify: true` (wait mode, protocol.md K17): `LISTEN` on `channel`,
   * calling `onPayload` with each notification's payload, and with `null` when the listening
   * connection was lost (its waiters then read the store again; a later call listens anew).
   * @returns a function that stops listening
   */
  listen?(channel: string, onPayload: (payload: string | null) => void): Promise<() => Promise<void>>;
}

/** True when `client` is a {@link SqlDriver} (its brand). */
export function isSqlDriver(client: unknown): client is SqlDriver<unknown> {
  return typeof client === 'object' && client !== null && (client as { kind?: unknown }).kind === SQL_DRIVER;
}

/**
 * What `PostgresStore` takes as `client` for transaction type `Tx`: a {@link SqlDriver} of it,
 * or, when `Tx` is {@link Queryable} (the default), a `pg.Pool` or PGlite as well.
 */
export type StoreClient<Tx> = SqlDriver<Tx> | (Queryable extends Tx ? SqlClient : never);

/**
 * The client normalised to four operations.
 * @typeParam Tx the transaction object {@link clientTransaction} hands the user's effects
 *   (`unknown` for code that only runs idem's own statements)
 */
export interface SqlExecutor<Tx = unknown> {
  /** Runs one of idem's statements on the client (as a named prepared statement where the driver supports it). */
  query(text: string, params?: unknown[]): Promise<QueryResultLike>;
  /** Runs one of idem's statements on `tx`, idem's handle inside {@link transaction} or {@link clientTransaction}. */
  queryOn(tx: Queryable, text: string, params?: unknown[]): Promise<QueryResultLike>;
  /** Runs `fn` in a transaction of idem's own; commits when it resolves, rolls back when it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  /**
   * Runs `fn` in a transaction with the client's own transaction object `tx` (for the user's
   * effects; on pg and PGlite the connection itself) and idem's handle `sql` in the same
   * transaction (for {@link queryOn}); commits when it resolves, rolls back when it throws.
   */
  clientTransaction<T>(fn: (tx: Tx, sql: Queryable) => Promise<T>): Promise<T>;
}

/** Deadlines of `toExecutor` (executor.ts). */
export interface ExecutorLimits {
  /**
   * Deadline in ms of each of idem's statements on a pool, including the wait for a
   * connection; past it the statement fails with a `StoreTimeoutError` and its connection
   * is destroyed, not returned to the pool. `0` or `Infinity`: none.
   */
  timeoutMs?: number;
  /** Callers that may wait for a pool connection; one more fails at once with a `StoreTimeoutError`. */
  maxWaiting?: number;
}

export { StoreTimeoutError } from './deadline.js';
