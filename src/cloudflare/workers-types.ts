/**
 * The slice of the Cloudflare Workers runtime types `idem/cloudflare` uses, declared here so
 * that neither `@cloudflare/workers-types` nor `wrangler types` is needed to import it: a
 * Durable Object namespace binding, its stub, and the object's storage (SQL storage on a
 * SQLite-backed class, the key-value API with `transaction` on a key-value one).
 */

/** An object id, from `idFromName`. */
export interface DurableObjectIdLike {
  toString(): string;
}

/** A Durable Object namespace binding (`env.IDEM`), typed by the stub its `get` returns. */
export interface DurableObjectNamespaceLike<Stub = unknown> {
  idFromName(name: string): DurableObjectIdLike;
  get(id: DurableObjectIdLike): Stub;
}

/** A cursor of `sql.exec`: its rows as objects. */
export interface SqlCursorLike {
  toArray(): Array<Record<string, unknown>>;
}

/** `ctx.storage.sql` of a SQLite-backed Durable Object: synchronous statements. */
export interface SqlStorageLike {
  exec(query: string, ...bindings: unknown[]): SqlCursorLike;
}

/** The key-value part of a Durable Object's storage, as a transaction sees it. */
export interface StorageTransactionLike {
  get<T = unknown>(key: string): Promise<T | undefined>;
  put(key: string, value: unknown): Promise<void>;
  delete(key: string): Promise<boolean>;
}

/** `ctx.storage`: the object's own transactional storage. */
export interface DurableObjectStorageLike extends StorageTransactionLike {
  /** Present on a SQLite-backed class; reading it on a key-value class throws. */
  readonly sql?: SqlStorageLike;
  /** Runs `fn` as one transaction: every statement, or none (SQLite-backed classes). */
  transactionSync?<T>(fn: () => T): T;
  /** Runs `fn` as one transaction, rolled back when it throws (key-value classes). */
  transaction<T>(fn: (txn: StorageTransactionLike) => Promise<T>): Promise<T>;
  setAlarm(scheduledTimeMs: number): Promise<void>;
}

/** The `ctx` a Durable Object is constructed with: the part idem reads. */
export interface DurableObjectStateLike {
  readonly storage: DurableObjectStorageLike;
}
