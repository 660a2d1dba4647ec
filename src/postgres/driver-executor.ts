/**
 * The executor over a {@link SqlDriver} (postgres.js, Drizzle, Kysely, Prisma, …): idem's
 * statements through the driver, under the same deadline as on a pool (`storeTimeoutMs`,
 * protocol.md H17).
 *
 * The difference from the pool: the connection belongs to the user's client, so idem cannot
 * destroy it when a statement is past its deadline. The request still gets its
 * `StoreTimeoutError` (503) at the deadline; the statement itself ends when the client's own
 * timeouts say (e.g. a `statement_timeout` on its connections).
 */
import type { ExecutorLimits, Queryable, QueryResultLike, SqlDriver, SqlExecutor } from './client.js';
import { deadline, describeStatement, hasDeadline, transactionDeadline } from './deadline.js';

const ignore = () => undefined;

/**
 * An executor over `driver`. `limits.maxWaiting` does not apply (the client queues for its
 * own connections); the options reject it for a driver.
 */
export function driverExecutor<Tx>(driver: SqlDriver<Tx>, limits: ExecutorLimits): SqlExecutor<Tx> {
  const ms = limits.timeoutMs ?? 0;
  const timed = (db: Queryable, text: string, params: unknown[] | undefined): Promise<QueryResultLike> =>
    deadline(db.query(text, params), ms, () => describeStatement(text), ignore);

  /**
   * The driver's transaction, with idem's statements in it under the deadline, and the commit
   * too (from the moment `fn` resolved). The user's own statements on `tx` have none, as on a
   * pool. Once a statement missed its deadline the transaction's outcome is the timeout, even
   * while the client still waits to roll back behind the silent statement.
   */
  function clientTransaction<T>(fn: (tx: Tx, sql: Queryable) => Promise<T>): Promise<T> {
    if (!hasDeadline(ms)) return driver.transaction(fn);
    const clock = transactionDeadline(ms);
    // The wait for a connection and the BEGIN are the client's, and unbounded on an exhausted
    // pool or a silent database: they get the deadline too. A transaction that opens after it
    // passed runs none of the phase (`opened()` throws, so the client rolls back): the request
    // was already answered 503 and its retry may run the phase (protocol.md H17).
    const opened = clock.start('waiting for a connection and BEGIN');
    const run = driver.transaction(async (tx, sql) => {
      opened();
      const inner: Queryable = { query: (text, params) => clock.wait(sql.query(text, params), describeStatement(text)) };
      const value = await fn(tx, inner);
      clock.start('the COMMIT'); // ended when `run` settles
      return value;
    });
    return clock.settle(run);
  }

  return {
    query: (text, params) => timed(driver, text, params),
    queryOn: (sql, text, params) => sql.query(text, params), // `sql` is the timed handle of clientTransaction
    transaction: (fn) => clientTransaction((_tx, sql) => fn(sql)),
    clientTransaction,
  };
}
