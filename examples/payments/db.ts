/**
 * Opens the example's database: PostgreSQL when DATABASE_URL is set (MySQL or MariaDB when it
 * is a mysql:// URL), otherwise embedded PGlite persisted in IDEM_DATA_DIR (default
 * ./.idem-data), so `npm start` needs no server.
 */
import { lockDataDir, type Queryable, type SqlClient } from 'idem/postgres';
import { type MySqlDatabase, mysqlDatabase } from './mysql.js';

export interface Database {
  /** The client to hand to PostgresStore (a pg.Pool or a PGlite instance), or the MySQL pool's wrapper. */
  client: (SqlClient & Queryable) | MySqlDatabase;
  /** `postgres`, `pglite` or `mysql`, for the banner. */
  kind: 'postgres' | 'pglite' | 'mysql';
  /** Where the data lives (URL without password, or the data directory). */
  location: string;
  close(): Promise<void>;
}

export async function openDatabase(env: NodeJS.ProcessEnv = process.env): Promise<Database> {
  if (env.DATABASE_URL && /^(mysql|mariadb):/i.test(env.DATABASE_URL)) {
    const { default: mysql } = await import('mysql2/promise');
    const url = new URL(env.DATABASE_URL);
    url.protocol = 'mysql:';
    const pool = mysql.createPool({
      uri: url.toString(),
      // Same limits as PostgreSQL's below: a silent server fails a connection after 5 s, and
      // idem's statements have their own deadline (IDEM_STORE_TIMEOUT_MS).
      connectionLimit: Number(env.PG_POOL_MAX ?? 20),
      connectTimeout: Number(env.PG_CONNECT_TIMEOUT_MS ?? 5000),
    });
    // The server's side of the deadline, as PostgreSQL's statement_timeout below: a statement waits
    // for a row lock at most this long (InnoDB's default is 50 s). A connection idem destroyed past
    // its deadline leaves its statement waiting on the server, holding its transaction's locks
    // until the wait ends; without this bound those pile up behind a frozen worker's row.
    const lockWaitS = Math.max(1, Math.ceil(Number(env.PG_QUERY_TIMEOUT_MS ?? 10_000) / 1000));
    // (On the callback pool underneath: its 'connection' event hands out the callback connection.)
    pool.pool.on('connection', (conn) => conn.query(`SET SESSION innodb_lock_wait_timeout = ${lockWaitS}`, () => undefined));
    url.password = '';
    return { client: mysqlDatabase(pool), kind: 'mysql', location: url.toString(), close: () => pool.end() };
  }
  if (env.DATABASE_URL) {
    const { default: pg } = await import('pg');
    const pool = new pg.Pool({
      connectionString: env.DATABASE_URL,
      max: Number(env.PG_POOL_MAX ?? 20),
      // A database that accepts connections and never answers must not hang requests: the
      // wait for a connection gives up after 5 s, a query after 10 s (the connection is then
      // destroyed, not reused), and the server ends a statement after 10 s on its side.
      connectionTimeoutMillis: Number(env.PG_CONNECT_TIMEOUT_MS ?? 5000),
      query_timeout: Number(env.PG_QUERY_TIMEOUT_MS ?? 10_000),
      statement_timeout: Number(env.PG_QUERY_TIMEOUT_MS ?? 10_000),
    });
    // An idle connection that breaks (server restart, network cut) is dropped from the pool;
    // without a listener node-postgres would crash the process with it.
    pool.on('error', (error) => console.error(`payments: idle database connection lost: ${error.message}`));
    const url = new URL(env.DATABASE_URL);
    url.password = '';
    return { client: pool, kind: 'postgres', location: url.toString(), close: () => pool.end() };
  }
  const { PGlite } = await import('@electric-sql/pglite');
  const dataDir = env.IDEM_DATA_DIR ?? './.idem-data';
  // One process per PGlite directory (see lockDataDir); the CLI takes the same lock.
  const unlock = lockDataDir(
    dataDir,
    (holder) =>
      new Error(
        `${dataDir} is in use by process ${holder}: PGlite allows one process per data directory. ` +
          'Stop it, or set IDEM_DATA_DIR to another directory, or DATABASE_URL to share a PostgreSQL.',
      ),
  );
  try {
    const db = await PGlite.create(dataDir);
    return {
      client: db,
      kind: 'pglite',
      location: dataDir,
      close: async () => {
        await db.close();
        unlock();
      },
    };
  } catch (error) {
    unlock();
    throw error;
  }
}
