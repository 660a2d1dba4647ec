/**
 * Kysely on MySQL (`MysqlDialect` over a mysql2 pool) as `MySqlStore`'s client, so a phase's
 * `tx` is Kysely's `Transaction<DB>`. Kysely does not expose its transaction's connection, so
 * idem's fenced write inside a phase runs through the transaction itself (`executeQuery` of a
 * raw compiled query, plugins off), on the same connection; outside a phase idem's statements
 * run on the mysql2 pool the dialect was given. Kysely is an optional peer dependency; nothing
 * of it is imported here.
 */
import { InvalidOptionError } from '../core/errors.js';
import { compiled, type KyselyCompiledQuery } from '../kysely/compiled.js';
import { MYSQL_DRIVER, type MySqlConnectionLike, type MySqlDriver, type MySqlPoolLike } from './client.js';

/** What Kysely's MySQL driver resolves a query to. */
interface KyselyMySqlResult {
  readonly rows: ReadonlyArray<unknown>;
  /** Set for INSERT, UPDATE, DELETE: mysql2's `affectedRows` (rows matched, with its default flags). */
  readonly numAffectedRows?: bigint;
  readonly insertId?: bigint;
}

/** The slice of a Kysely instance or transaction that runs a compiled query, plugins off. */
interface KyselyMySqlExecutor {
  executeQuery(query: KyselyCompiledQuery): Promise<KyselyMySqlResult>;
  withoutPlugins(): { executeQuery(query: KyselyCompiledQuery): Promise<KyselyMySqlResult> };
}

/**
 * The slice of `Kysely<DB>` idem uses on MySQL.
 * @typeParam Tx Kysely's `Transaction<DB>`
 */
export interface KyselyMySqlLike<Tx extends KyselyMySqlExecutor> {
  transaction(): { execute<T>(callback: (trx: Tx) => Promise<T>): Promise<T> };
}

/** A connection-shaped handle over Kysely's transaction: idem's statements through `executeQuery`. */
function onTransaction(trx: KyselyMySqlExecutor): MySqlConnectionLike {
  const plain = trx.withoutPlugins();
  return {
    async query(options) {
      const result = await plain.executeQuery(compiled(options.sql, options.values));
      if (result.numAffectedRows === undefined) return [result.rows, undefined];
      return [{ affectedRows: Number(result.numAffectedRows), insertId: result.insertId ?? 0 }, undefined];
    },
    // Kysely owns the connection: it commits or rolls back and gives it back.
    release: () => undefined,
    destroy: () => undefined,
  };
}

/**
 * `MySqlStore`'s client over `new Kysely({ dialect: new MysqlDialect({ pool }) })`, with that
 * same mysql2 promise pool for idem's statements outside a phase.
 * @throws {InvalidOptionError} when `db` is not a Kysely instance or `pool` not a mysql2 pool
 * @example
 * ```ts
 * const store = new MySqlStore({ client: kyselyMySql(db, pool) });
 * await idem.phase('charge', (tx) => tx.insertInto('charges').values({ amount }).execute()); // tx: Kysely's Transaction
 * ```
 */
export function kyselyMySql<Tx extends KyselyMySqlExecutor>(db: KyselyMySqlLike<Tx>, pool: MySqlPoolLike): MySqlDriver<Tx> {
  if (typeof db?.transaction !== 'function') throw new InvalidOptionError('idem/mysql: kyselyMySql needs a Kysely instance (new Kysely({ dialect }))');
  if (typeof pool?.getConnection !== 'function') throw new InvalidOptionError("idem/mysql: kyselyMySql needs the dialect's mysql2 promise pool");
  return {
    [MYSQL_DRIVER]: true,
    name: 'Kysely (MySQL)',
    pool,
    transaction: (fn) => db.transaction().execute((trx) => fn(trx, onTransaction(trx))),
  };
}
