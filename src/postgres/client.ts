import { createHash } from 'node:crypto';

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

/** The client normalised to three operations. */
export interface SqlExecutor {
  /** Runs one of idem's statements on the client (as a named prepared statement where the driver supports it). */
  query(text: string, params?: unknown[]): Promise<QueryResultLike>;
  /** Runs one of idem's statements on `tx`, a connection inside {@link transaction}. */
  queryOn(tx: Queryable, text: string, params?: unknown[]): Promise<QueryResultLike>;
  /** Runs `fn` in a transaction; commits when it resolves, rolls back when it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
}

/**
 * node-postgres runs a query config with a `name` as a prepared statement, parsed and
 * planned once per connection. idem's statements are fixed texts, so naming them removes
 * the parse and plan work from every request (measured: about 2-3x the throughput of the
 * claim statement at concurrency 16; see bench/). The name is derived from the text, so two
 * stores on different tables sharing one pool never collide.
 */
const names = new Map<string, string>();
function statementName(text: string): string {
  let name = names.get(text);
  if (!name) {
    name = 'idem_' + createHash('sha256').update(text).digest('hex').slice(0, 24);
    names.set(text, name);
  }
  return name;
}
type NamedQueryable = { query(config: { name: string; text: string; values?: unknown[] }): Promise<QueryResultLike> };
function named(db: Queryable, text: string, params?: unknown[]): Promise<QueryResultLike> {
  return (db as unknown as NamedQueryable).query({ name: statementName(text), text, values: params ?? [] });
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
    return {
      query: (text, params) => c.query(text, params),
      queryOn: (tx, text, params) => tx.query(text, params),
      transaction: (fn) => c.transaction(fn),
    };
  }
  if (typeof (client as PoolLike).connect === 'function' && typeof (client as PoolLike).totalCount === 'number') {
    const pool = client as PoolLike;
    return {
      query: (text, params) => named(pool, text, params),
      queryOn: (tx, text, params) => named(tx, text, params),
      async transaction(fn) {
        const conn = await pool.connect();
        // A connection that breaks between two statements of the transaction (no query in
        // flight) emits 'error' on the client; unheard, that would crash the process. The
        // next statement fails instead, and the catch below discards the connection.
        const events = conn as unknown as { on?(event: 'error', fn: () => void): void; off?(event: 'error', fn: () => void): void };
        const ignore = () => undefined;
        events.on?.('error', ignore);
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
        } finally {
          events.off?.('error', ignore);
        }
      },
    };
  }
  throw new TypeError(
    'idem/postgres: `client` must be a pg.Pool (a single pg.Client cannot run concurrent transactions) or a PGlite instance',
  );
}
