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
}

/** A client with its own transaction scope that rolls back on throw (PGlite). */
export interface TransactionalLike extends Queryable {
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
}

/** What the PostgreSQL store accepts: a `pg.Pool`, a PGlite instance, or anything shaped like either. */
export type SqlClient = PoolLike | TransactionalLike;

/** The client normalised to two operations. */
export interface SqlExecutor {
  query(text: string, params?: unknown[]): Promise<QueryResultLike>;
  /** Runs `fn` in a transaction; commits when it resolves, rolls back when it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
}

/**
 * Normalises a `pg.Pool` or a PGlite instance.
 *
 * @throws {TypeError} when `client` is neither (a single `pg.Client` cannot run concurrent
 *   transactions; pass a `pg.Pool`).
 */
export function toExecutor(client: SqlClient): SqlExecutor {
  if (!client || typeof (client as Queryable).query !== 'function') {
    throw new TypeError('idem/postgres: pass a pg.Pool or a PGlite instance as `client`');
  }
  if (typeof (client as TransactionalLike).transaction === 'function') {
    const c = client as TransactionalLike;
    return { query: (text, params) => c.query(text, params), transaction: (fn) => c.transaction(fn) };
  }
  if (typeof (client as PoolLike).connect === 'function' && typeof (client as PoolLike).totalCount === 'number') {
    const pool = client as PoolLike;
    return {
      query: (text, params) => pool.query(text, params),
      async transaction(fn) {
        const conn = await pool.connect();
        try {
          await conn.query('BEGIN');
          const value = await fn(conn);
          await conn.query('COMMIT');
          conn.release();
          return value;
        } catch (error) {
          try {
            await conn.query('ROLLBACK');
            conn.release();
          } catch (rollbackError) {
            // The connection is unusable; destroy it instead of returning it to the pool.
            conn.release(rollbackError as Error);
          }
          throw error;
        }
      },
    };
  }
  throw new TypeError(
    'idem/postgres: `client` must be a pg.Pool (a single pg.Client cannot run concurrent transactions) or a PGlite instance',
  );
}

/** Rows changed by a statement, whichever driver ran it. */
export function affectedRows(result: QueryResultLike): number {
  return result.rowCount ?? result.affectedRows ?? result.rows.length;
}
