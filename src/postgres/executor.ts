/**
 * `toExecutor`: a `pg.Pool`, a PGlite instance or a {@link SqlDriver} normalised to the
 * {@link SqlExecutor} every part of the store runs its statements through (the client's types
 * are in client.ts, the pool's and the driver's executors in pool-executor.ts and
 * driver-executor.ts).
 */
import { InvalidOptionError } from '../core/errors.js';
import {
  isSqlDriver,
  type ExecutorLimits,
  type PoolLike,
  type Queryable,
  type SqlClient,
  type SqlDriver,
  type SqlExecutor,
  type StoreClient,
  type TransactionalLike,
} from './client.js';
import { driverExecutor } from './driver-executor.js';
import { poolExecutor } from './pool-executor.js';

/**
 * Normalises a `pg.Pool`, a PGlite instance or a {@link SqlDriver}.
 *
 * @throws {TypeError} when `client` is none of them (a single `pg.Client` cannot run concurrent
 *   transactions; pass a `pg.Pool`).
 * @throws {InvalidOptionError} for a driver without `query` or `transaction`
 */
export function toExecutor(client: SqlClient, limits?: ExecutorLimits): SqlExecutor<Queryable>;
export function toExecutor<Tx>(client: StoreClient<Tx>, limits?: ExecutorLimits): SqlExecutor<Tx>;
export function toExecutor<Tx>(client: StoreClient<Tx>, limits: ExecutorLimits = {}): SqlExecutor<Tx> {
  if (isSqlDriver(client)) {
    const driver = client as SqlDriver<Tx>;
    if (typeof driver.query !== 'function' || typeof driver.transaction !== 'function') {
      throw new InvalidOptionError(`idem/postgres: the ${String(driver.name)} driver needs query() and transaction()`);
    }
    return driverExecutor(driver, limits);
  }
  if (!client || typeof (client as Queryable).query !== 'function') {
    throw new TypeError('idem/postgres: pass a pg.Pool, a PGlite instance or a client driver (idem/postgresjs, …) as `client`');
  }
  // From here on Tx is Queryable (StoreClient allows a pg.Pool or PGlite only then).
  if (typeof (client as TransactionalLike).transaction === 'function') {
    const c = client as TransactionalLike;
    const executor: SqlExecutor<Queryable> = {
      query: (text, params) => c.query(text, params),
      queryOn: (tx, text, params) => tx.query(text, params),
      transaction: (fn) => c.transaction(fn),
      clientTransaction: (fn) => c.transaction((tx) => fn(tx, tx)),
    };
    return executor as SqlExecutor<Tx>;
  }
  if (typeof (client as PoolLike).connect === 'function' && typeof (client as PoolLike).totalCount === 'number') {
    return poolExecutor(client as PoolLike, limits) as SqlExecutor<Tx>;
  }
  throw new TypeError('idem/postgres: `client` must be a pg.Pool (a single pg.Client cannot run concurrent transactions) or a PGlite instance');
}
