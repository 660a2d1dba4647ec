/**
 * The executor over a node-postgres style pool, with a deadline on every statement idem
 * issues (`storeTimeoutMs`, protocol.md H17): a database that accepts connections and never
 * answers costs a request at most the deadline, never a pool slot for good.
 */
import { createHash } from 'node:crypto';
import type { ExecutorLimits, PoolClientLike, PoolLike, Queryable, QueryResultLike, SqlExecutor } from './client.js';
import { hearConnectionErrors } from './connection-errors.js';
import { deadline, describeStatement, hasDeadline, StoreTimeoutError, type TransactionDeadline, transactionDeadline } from './deadline.js';

/** The error lives with the other stores' deadline (src/store/deadline.ts); re-exported from its old path. */
export { StoreTimeoutError };

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

/** Connections this executor has handed back (released or destroyed): never released twice. */
const done = new WeakSet<PoolClientLike>();
function destroy(conn: PoolClientLike, reason: Error): void {
  if (done.has(conn)) return;
  done.add(conn);
  conn.release(reason); // node-postgres ends a client released with an error (a hung socket is destroyed)
}
function giveBack(conn: PoolClientLike): void {
  if (done.has(conn)) return;
  done.add(conn);
  conn.release();
}

/**
 * An executor over `pool`. Each statement checks a connection out (bounded by `maxWaiting`
 * and the deadline), runs, and gives it back; a statement past the deadline destroys its
 * connection (a silent socket's protocol state is unknown, so it is never reused).
 */
export function poolExecutor(pool: PoolLike, limits: ExecutorLimits): SqlExecutor<Queryable> {
  const timeoutMs = limits.timeoutMs ?? 0;
  const maxWaiting = limits.maxWaiting ?? Infinity;
  // A pool without a connect timeout waits forever for a server that accepted the TCP
  // connection and never answers, and the attempt holds a pool slot meanwhile.
  if (hasDeadline(timeoutMs) && pool.options && !pool.options.connectionTimeoutMillis) {
    pool.options.connectionTimeoutMillis = timeoutMs;
  }

  /**
   * The deadline of each transaction a checked-out connection is in, so idem's statements on
   * it (`queryOn`) end the transaction as on a driver (see `TransactionDeadline`).
   */
  const clocks = new WeakMap<PoolClientLike, TransactionDeadline>();

  /** `promise` under the deadline: the transaction's when there is one, else one of its own. */
  function wait<T>(promise: Promise<T>, what: string | (() => string), onTimeout: () => void, clock: TransactionDeadline | undefined): Promise<T> {
    return clock ? clock.wait(promise, what, onTimeout) : deadline(promise, timeoutMs, what, onTimeout);
  }

  async function checkout(clock?: TransactionDeadline): Promise<PoolClientLike> {
    if ((pool.waitingCount ?? 0) >= maxWaiting) {
      throw new StoreTimeoutError(`idem/postgres: ${pool.waitingCount} callers already wait for a pool connection (maxPoolWaiting ${maxWaiting})`);
    }
    let late = false;
    const pending = pool.connect();
    // A connection that arrives after the deadline goes straight back to the pool.
    pending.then(
      (conn) => late && giveBack(conn),
      () => undefined,
    );
    const conn = await wait(pending, 'waiting for a pool connection', () => (late = true), clock);
    done.delete(conn);
    hearConnectionErrors(conn); // a socket that ends mid-statement must not end the process (protocol.md H24)
    return conn;
  }

  /** One statement on `conn` under the deadline; past it, `conn` is destroyed. */
  function timed(conn: PoolClientLike, text: string, params?: unknown[], plain = false): Promise<QueryResultLike> {
    const run = plain ? conn.query(text) : named(conn, text, params);
    return wait(
      run,
      () => describeStatement(text),
      () => destroy(conn, new StoreTimeoutError('statement deadline passed')),
      clocks.get(conn),
    );
  }

  /** A transaction on a connection of its own; its outcome is the first wait that missed the deadline, if one did. */
  function transaction<T>(fn: (conn: Queryable) => Promise<T>): Promise<T> {
    const clock = transactionDeadline(timeoutMs);
    return clock.settle(inTransaction(clock, fn));
  }

  async function inTransaction<T>(clock: TransactionDeadline, fn: (conn: Queryable) => Promise<T>): Promise<T> {
    const conn = await checkout(clock);
    clocks.set(conn, clock);
    // A connection that breaks between two statements (no query in flight) emits 'error': the
    // listener checkout() gave it hears that; the next statement fails and the catch discards it.
    try {
      await timed(conn, 'BEGIN', undefined, true);
      const value = await fn(conn);
      await timed(conn, 'COMMIT', undefined, true);
      giveBack(conn);
      return value;
    } catch (error) {
      if (!done.has(conn)) {
        try {
          await timed(conn, 'ROLLBACK', undefined, true);
          giveBack(conn);
        } catch (rollbackError) {
          // The connection is unusable; destroy it instead of returning it to the pool.
          destroy(conn, rollbackError as Error);
        }
      }
      throw error;
    } finally {
      clocks.delete(conn);
    }
  }

  return {
    async query(text, params) {
      const conn = await checkout();
      try {
        const result = await timed(conn, text, params);
        giveBack(conn);
        return result;
      } catch (error) {
        destroy(conn, error as Error); // as pool.query does: a failed statement's connection is not reused
        throw error;
      }
    },
    queryOn: (tx, text, params) => (isPoolClient(tx) ? timed(tx, text, params) : named(tx, text, params)),
    transaction,
    // The user's transaction is the checked-out connection itself: their statements on it run
    // as they wrote them (unnamed, no deadline); idem's run through `queryOn`.
    clientTransaction: (fn) => transaction((conn) => fn(conn, conn)),
  };
}

function isPoolClient(tx: Queryable): tx is PoolClientLike {
  return typeof (tx as PoolClientLike).release === 'function';
}
