/**
 * idem's statements on a mysql2 pool, each under `storeTimeoutMs` (protocol.md H17, H24): a
 * server that accepts connections and never answers costs a request the deadline, and a
 * connection past it, or broken, is destroyed, never handed back to the pool.
 */
import { StoreTimeoutError, withDeadline } from '../store/deadline.js';
import type { MySqlConnectionLike, MySqlPoolLike, MySqlResultHeader, MySqlRow } from './client.js';

/** Connections idem has handed back (released or destroyed): never twice. */
const done = new WeakSet<object>();
/** Connections with idem's `'error'` listener. */
const heard = new WeakSet<object>();
const drop = (): void => undefined;

/** Runs idem's statements on a pool, with the deadline. */
export class MySqlExecutor<C extends MySqlConnectionLike> {
  constructor(
    private readonly pool: MySqlPoolLike<C>,
    /** ms; 0: none. */
    readonly timeoutMs: number,
  ) {}

  /** A connection of the pool, under the deadline; one that arrives late goes straight back. */
  async checkout(): Promise<C> {
    let late = false;
    const pending = this.pool.getConnection();
    pending.then(
      (conn) => {
        if (late) conn.release();
      },
      () => undefined,
    );
    const conn = await withDeadline(pending, this.timeoutMs, 'idem/mysql: waiting for a pool connection', () => (late = true));
    done.delete(conn);
    // A socket that breaks while idem holds the connection emits 'error' on mysql2's connection
    // after failing the statement in flight; the pool's own listener is a `once`. Without a
    // listener a second one would end the process (protocol.md H24).
    const core = conn.connection;
    if (core && typeof core.on === 'function' && !heard.has(core)) {
      heard.add(core);
      core.on('error', drop);
    }
    return conn;
  }

  /** Back to the pool (once). */
  release(conn: C): void {
    if (done.has(conn)) return;
    done.add(conn);
    conn.release();
  }

  /** Closed for good (once): its protocol state is unknown. */
  destroy(conn: C): void {
    if (done.has(conn)) return;
    done.add(conn);
    conn.destroy();
  }

  /**
   * One statement on `conn` under the deadline; past it (or on a connection error) `conn` is
   * destroyed by the caller. `owned: false` for a connection a driver checked out (Drizzle's
   * transaction): past the deadline it is left to its owner, who rolls back and releases it.
   */
  async on<R = MySqlRow[]>(conn: MySqlConnectionLike, sql: string, values: unknown[] = [], timed = true, owned = true): Promise<R> {
    const run = conn.query({ sql, values, rowsAsArray: false, nestTables: false, typeCast: true });
    // Built only past the deadline: splitting the statement's text costs µs on every statement.
    const describe = () => `idem/mysql: ${sql.trim().split(/\s+/).slice(0, 3).join(' ')} …`;
    const [result] = timed ? await withDeadline(run, this.timeoutMs, describe, () => owned && this.destroy(conn as C)) : await run;
    return result as R;
  }

  /** One statement on a connection of its own (autocommit). */
  async query<R = MySqlRow[]>(sql: string, values: unknown[] = [], timed = true): Promise<R> {
    const conn = timed ? await this.checkout() : await this.pool.getConnection();
    try {
      const result = await this.on<R>(conn, sql, values, timed);
      this.release(conn);
      return result;
    } catch (error) {
      // A server error leaves the connection usable; anything else (a lost socket, the
      // deadline) may not.
      if (isServerError(error)) this.release(conn);
      else this.destroy(conn);
      throw error;
    }
  }

  /** The rows of a SELECT. */
  rows(sql: string, values: unknown[] = [], timed = true): Promise<MySqlRow[]> {
    return this.query<MySqlRow[]>(sql, values, timed);
  }

  /** A write's result header. */
  write(sql: string, values: unknown[] = [], timed = true): Promise<MySqlResultHeader> {
    return this.query<MySqlResultHeader>(sql, values, timed);
  }

  /**
   * `fn` in a transaction on a connection of its own: committed when it resolves, rolled back
   * when it throws (the error goes on). `fn` gets the connection, the user's `tx`.
   */
  async transaction<T>(fn: (conn: C) => Promise<T>): Promise<T> {
    const conn = await this.checkout();
    try {
      await this.on(conn, 'START TRANSACTION');
      const value = await fn(conn);
      await this.on(conn, 'COMMIT');
      this.release(conn);
      return value;
    } catch (error) {
      if (!done.has(conn)) {
        try {
          await this.on(conn, 'ROLLBACK');
          this.release(conn);
        } catch {
          this.destroy(conn);
        }
      }
      throw error;
    }
  }
}

/** An error the server sent (it has an SQL state and is not fatal): the connection stays usable. */
export function isServerError(error: unknown): boolean {
  if (error instanceof StoreTimeoutError) return false;
  const e = error as { sqlState?: unknown; fatal?: unknown };
  return typeof e?.sqlState === 'string' && e.fatal !== true;
}
