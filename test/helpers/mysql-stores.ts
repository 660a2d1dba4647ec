/**
 * MySqlStore entries for the store factory list (test/helpers/stores.ts), on the MariaDB or
 * MySQL server of MYSQL_URL: each backend (one `describe`) creates a database of its own,
 * `idem_<random>`, and drops it when it closes; each `fresh()` a new table in it. The
 * backdoors are SQL on the same pool; the business row of a phase is written with mysql2's own
 * `query` on the phase's `tx` (the pool's connection, in the transaction).
 */
import { randomBytes } from 'node:crypto';
import mysql, { type Pool, type PoolConnection, type RowDataPacket } from 'mysql2/promise';
import { drizzle, type MySql2Database } from 'drizzle-orm/mysql2';
import { sql } from 'drizzle-orm';
import { CompiledQuery, type Generated, Kysely, MysqlDialect, type Transaction } from 'kysely';
import { drizzleMySql, kyselyMySql, MySqlStore, type MySqlStoreOptions } from '../../src/mysql/index.js';
import { serviceUrl } from './services.js';
import { tableName } from './engines.js';
import { toKeyRow } from './http.js';
import type { StoreFactory, StoreHarness } from './stores.js';

/** Drizzle's transaction on mysql2. */
type DrizzleTx = Parameters<Parameters<MySql2Database['transaction']>[0]>[0];

/** A database of its own on MYSQL_URL's server, and a pool on it; `close` drops the database. */
export async function openMySqlDatabase(options: mysql.PoolOptions = {}): Promise<{ pool: Pool; database: string; url: string; close(): Promise<void> }> {
  const url = serviceUrl('MYSQL_URL');
  if (!url) throw new Error('MYSQL_URL is not set');
  const database = `idem_${randomBytes(5).toString('hex')}`;
  const admin = await mysql.createConnection(url);
  await admin.query(`CREATE DATABASE \`${database}\``);
  await admin.end();
  const dbUrl = new URL(url);
  dbUrl.pathname = `/${database}`;
  const pool = mysql.createPool({ uri: dbUrl.toString(), connectionLimit: 20, ...options });
  return {
    pool,
    database,
    url: dbUrl.toString(),
    async close() {
      await pool.end().catch(() => undefined);
      const admin = await mysql.createConnection(url);
      await admin.query(`DROP DATABASE IF EXISTS \`${database}\``);
      await admin.end();
    },
  };
}

/**
 * How a phase's `tx` writes through one client: what the store gets as `client`, the business
 * row (the contract's effect), and the backdoor that moves the key's token inside the commit.
 * @typeParam Tx the client's transaction object
 */
export interface MySqlClientUnderTest<Tx> {
  client: MySqlStoreOptions<Tx>['client'];
  insert(tx: Tx, side: string, note: string): Promise<void>;
  bumpToken(tx: Tx, table: string, scope: Buffer, key: Buffer): Promise<void>;
}

/** mysql2 itself: a phase's `tx` is the pool's `PoolConnection`. */
const onPool = (pool: Pool): MySqlClientUnderTest<PoolConnection> => ({
  client: pool,
  insert: async (tx, side, note) => void (await tx.query(`INSERT INTO \`${side}\` (note) VALUES (?)`, [note])),
  bumpToken: async (tx, table, scope, key) =>
    void (await tx.query(`UPDATE \`${table}\` SET lock_version = lock_version + 1 WHERE scope = ? AND \`key\` = ?`, [scope, key])),
});

/** The MySQL store on a database of its own, every `fresh()` a new table. */
export function mysqlFactory<Tx = PoolConnection>(
  name: string,
  options: Partial<MySqlStoreOptions<Tx>> = {},
  contractOnly = false,
  on: (pool: Pool) => MySqlClientUnderTest<Tx> = onPool as unknown as (pool: Pool) => MySqlClientUnderTest<Tx>,
): StoreFactory {
  return {
    name,
    contractOnly,
    capabilities: { sweep: 'rows', partitioned: false, sql: true, virtualTime: false },
    async connect() {
      const db = await openMySqlDatabase();
      const { pool } = db;
      const q = async <T = RowDataPacket[]>(sql: string, values: unknown[] = []) => (await pool.query(sql, values))[0] as T;
      return {
        close: () => db.close(),
        async fresh() {
          const table = tableName();
          const side = `${table}_side`;
          const under = on(pool);
          const store = new MySqlStore<Tx>({ ...options, client: under.client, table });
          await store.migrate();
          await q(`CREATE TABLE \`${side}\` (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT NOT NULL) ENGINE=InnoDB`);
          const where = 'WHERE scope = ? AND `key` = ?';
          const id = (scope: string, key: string) => [Buffer.from(scope), Buffer.from(key)];
          const harness: StoreHarness<Tx> = {
            store,
            sweep: (o) => store.sweep(o),
            effect: (note) => async (tx) => {
              await under.insert(tx, side, note);
              return { note };
            },
            effects: async () => (await q(`SELECT note FROM \`${side}\` ORDER BY id`)).map((r) => String(r.note)),
            async age(scope, key, ms) {
              await q(
                `UPDATE \`${table}\` SET created_at = created_at - INTERVAL ? MICROSECOND, locked_until = locked_until - INTERVAL ? MICROSECOND ${where}`,
                [ms * 1000, ms * 1000, ...id(scope, key)],
              );
            },
            async setLease(scope, key, ms) {
              await q(`UPDATE \`${table}\` SET locked_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND ${where}`, [ms * 1000, ...id(scope, key)]);
            },
            async tokenOf(scope, key) {
              const row = (await q(`SELECT lock_version FROM \`${table}\` ${where}`, id(scope, key)))[0];
              return row ? Number(row.lock_version) : undefined;
            },
            snapshot: async (scope, key) => (await q(`SELECT * FROM \`${table}\` ${where}`, id(scope, key)))[0],
            count: async () => Number((await q(`SELECT COUNT(*) AS n FROM \`${table}\``))[0]!.n),
            async staleInTx(tx, scope, key) {
              await under.bumpToken(tx, table, Buffer.from(scope), Buffer.from(key));
            },
            dump: async () =>
              (await q(`SELECT * FROM \`${table}\``))
                .map((row) =>
                  JSON.stringify(row, (_k, v: unknown) =>
                    v && typeof v === 'object' && (v as { type?: string }).type === 'Buffer'
                      ? Buffer.from((v as { data: number[] }).data).toString('latin1')
                      : v,
                  ),
                )
                .join('\n'),
            rows: async () =>
              (
                await q(
                  `SELECT scope, \`key\`, state, recovery_point, CAST(lock_version AS CHAR) AS lock_version, LOWER(HEX(fingerprint)) AS fingerprint,
                     response_status, LOWER(HEX(response_body)) AS response_body, response_headers,
                     (locked_until IS NOT NULL AND locked_until > UTC_TIMESTAMP(6)) AS locked
                   FROM \`${table}\` ORDER BY scope, \`key\``,
                )
              ).map(toKeyRow),
            async sweepKey(scope, key) {
              await harness.age(scope, key, 60 * 60_000);
              await harness.setLease(scope, key, -1000);
              return store.sweep({ retentionMs: 60_000 });
            },
            async drop() {
              await q(`DROP TABLE IF EXISTS \`${side}\``);
              await store.dropTables();
            },
          };
          return harness as unknown as StoreHarness;
        },
      };
    },
  };
}

/** Drizzle on the pool (`drizzleMySql`): a phase's `tx` is Drizzle's transaction, written with Drizzle's `sql` template. */
function onDrizzle(pool: Pool): MySqlClientUnderTest<DrizzleTx> {
  const db = drizzle({ client: pool });
  return {
    client: drizzleMySql(db),
    insert: async (tx, side, note) => void (await tx.execute(sql`INSERT INTO ${sql.identifier(side)} (note) VALUES (${note})`)),
    bumpToken: async (tx, table, scope, key) =>
      void (await tx.execute(
        sql`UPDATE ${sql.identifier(table)} SET lock_version = lock_version + 1 WHERE scope = ${scope} AND ${sql.identifier('key')} = ${key}`,
      )),
  };
}

/** Kysely's MysqlDialect on the pool (`kyselyMySql`): a phase's `tx` is Kysely's `Transaction`. */
function onKysely(pool: Pool): MySqlClientUnderTest<Transaction<Record<string, { id: Generated<number>; note: string }>>> {
  // The pool Kysely is given is a callback pool (its MysqlDialect calls getConnection(callback)).
  const db = new Kysely<Record<string, { id: Generated<number>; note: string }>>({ dialect: new MysqlDialect({ pool: pool.pool }) });
  return {
    client: kyselyMySql(db, pool),
    insert: async (tx, side, note) => void (await tx.insertInto(side).values({ note }).execute()),
    bumpToken: async (tx, table, scope, key) =>
      void (await tx.executeQuery(CompiledQuery.raw(`UPDATE \`${table}\` SET lock_version = lock_version + 1 WHERE scope = ? AND \`key\` = ?`, [scope, key]))),
  };
}

/** The MySQL entries, when MYSQL_URL is set. */
export function mysqlFactories(): StoreFactory[] {
  if (!serviceUrl('MYSQL_URL')) return [];
  return [
    { ...mysqlFactory('MySqlStore on MariaDB/MySQL (mysql2)'), adapterHarnesses: ['hono', 'express'] },
    // Drizzle's transaction as a phase's tx: the store contract shows its fenced phase leaves no
    // business row; the engine and HTTP suites on the mysql2 entry cover the rest.
    mysqlFactory('MySqlStore on Drizzle (drizzle-orm/mysql2)', {}, true, onDrizzle),
    mysqlFactory('MySqlStore on Kysely (MysqlDialect)', {}, true, onKysely),
  ];
}
