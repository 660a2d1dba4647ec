/**
 * A Drizzle database on mysql2 (`drizzle-orm/mysql2`) as `MySqlStore`'s client, so a phase's
 * `tx` is Drizzle's own transaction (`tx.insert(charges)…`). idem's statements run on the pool
 * behind `db.$client`, and inside a phase on the connection of Drizzle's transaction
 * (`tx.session.client`, the pool connection Drizzle checked out), so they commit together.
 * Drizzle is an optional peer dependency; nothing of it is imported here.
 */
import { InvalidOptionError } from '../core/errors.js';
import { MYSQL_DRIVER, type MySqlConnectionLike, type MySqlDriver, type MySqlPoolLike } from './client.js';

/**
 * The slice of a Drizzle MySQL database idem uses.
 * @typeParam Tx Drizzle's transaction (`MySqlTransaction<…>` of the database's schema)
 */
export interface DrizzleMySqlLike<Tx> {
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  readonly $client?: unknown;
}

/**
 * `MySqlStore`'s client over a Drizzle database made with `drizzle(pool)` of
 * `drizzle-orm/mysql2` on a mysql2 promise pool.
 * @throws {InvalidOptionError} when `db.$client` is not a mysql2 pool
 * @example
 * ```ts
 * const store = new MySqlStore({ client: drizzleMySql(drizzle(pool)) });
 * await idem.phase('charge', (tx) => tx.insert(charges).values({ amount })); // tx: Drizzle's transaction
 * ```
 */
export function drizzleMySql<Tx>(db: DrizzleMySqlLike<Tx>): MySqlDriver<Tx> {
  const pool = db.$client as MySqlPoolLike | undefined;
  if (typeof pool?.getConnection !== 'function') {
    throw new InvalidOptionError(
      'idem/mysql: drizzleMySql needs drizzle(pool) of drizzle-orm/mysql2 on a mysql2 promise pool (mysql.createPool from mysql2/promise)',
    );
  }
  return {
    [MYSQL_DRIVER]: true,
    name: 'Drizzle (mysql2)',
    pool,
    transaction: (fn) =>
      db.transaction((tx) => {
        const conn = (tx as { session?: { client?: MySqlConnectionLike } }).session?.client;
        if (typeof conn?.query !== 'function') throw new Error("idem/mysql: Drizzle's transaction has no mysql2 connection (tx.session.client)");
        return fn(tx, conn);
      }),
  };
}
