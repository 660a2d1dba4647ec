import { poolExecutor } from './pool-executor.js';

/**
 * The slice of a PostgreSQL client that idem uses, declared locally so that `pg` and PGlite
 * both fit without being imported (they are optional peer dependencies).
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

/** What the PostgreSQL store accepts: a `pg.Pool`, a PGlite instance, or anything shaped like either. */
export type SqlClient = PoolLike | TransactionalLike;

/** The client normalised to three operations. */
export interface SqlExecutor {
  /** Runs one of idem's statements on the client (as a named prepared statement where the driver supports it). */
  query(text: string, params?: unknown[]): Promise<QueryResultLike>;
  /** Runs one of idem's statements on `tx`, a connection inside {@link transaction}. */
  queryOn(tx: Queryable, text: string, params?: unknown[]): Promise<QueryResultLike>;
  /** Runs `fn` in a transaction; commits when it resolves, rolls back when it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
}

/** Deadlines of {@link toExecutor}. */
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

export { StoreTimeoutError } from './pool-executor.js';

/**
 * Normalises a `pg.Pool` or a PGlite instance.
 *
 * @throws {TypeError} when `client` is neither (a single `pg.Client` cannot run concurrent
 *   transactions; pass a `pg.Pool`).
 */
export function toExecutor(client: SqlClient, limits: ExecutorLimits = {}): SqlExecutor {
  if (!client || typeof (client as Queryable).query !== 'function') {
    throw new TypeError('idem/postgres: pass a pg.Pool or a PGlite instance as `client`');
  }
  if (typeof (client as TransactionalLike).transaction === 'function') {
    const c = client as TransactionalLike;
    return {
      query: (text, params) => c.query(text, params),
      queryOn: (tx, text, params) => tx.query(text, params),
      transaction: (fn) => c.transaction(fn),
    };
  }
  if (typeof (client as PoolLike).connect === 'function' && typeof (client as PoolLike).totalCount === 'number') {
    return poolExecutor(client as PoolLike, limits);
  }
  throw new TypeError('idem/postgres: `client` must be a pg.Pool (a single pg.Client cannot run concurrent transactions) or a PGlite instance');
}
