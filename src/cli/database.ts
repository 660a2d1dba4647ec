import type { MySqlPoolLike } from '../mysql/client.js';
import type { SqlClient } from '../postgres/client.js';
import { lockDataDir } from '../postgres/data-dir.js';

/** The default PGlite data directory, shared with the example payments server. */
export const DEFAULT_DATA_DIR = './.idem-data';

export interface CliDatabase {
  /** A pg.Pool or PGlite; with a `mysql://` URL, a mysql2 promise pool (`kind` `mysql`). */
  client: SqlClient;
  /** `mysql` for a MySQL or MariaDB server (`mysql://`, `mariadb://`), else `postgres`. */
  kind: 'postgres' | 'mysql';
  /** `kind` `mysql`: the mysql2 promise pool, as `MySqlStore` takes it. */
  mysql?: MySqlPoolLike;
  /** Where the data lives, for messages: the URL without its password, or the data directory. */
  location: string;
  close(): Promise<void>;
}

/** Whether `url` names a MySQL or MariaDB server (`mysql://`, `mariadb://`), read before connecting. */
export function isMySqlUrl(url: string | undefined): boolean {
  return url !== undefined && /^(mysql|mariadb):/i.test(url.trim());
}

/** A one-line error for the user; the CLI prints its message and exits non-zero. */
export class CliError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'CliError';
  }
}

/**
 * Connects and checks the connection with one round trip, so an unreachable database fails
 * here with a clear message instead of in the middle of a command.
 *
 * @throws {CliError} for a malformed URL, a missing driver, an unreachable server, or a PGlite
 *   directory held by another process
 */
export async function openDatabase(options: { databaseUrl?: string; dataDir?: string }): Promise<CliDatabase> {
  if (options.databaseUrl) {
    let url: URL;
    try {
      url = new URL(options.databaseUrl);
    } catch {
      throw new CliError(`--database-url is not a URL: ${JSON.stringify(options.databaseUrl)}`);
    }
    if (url.protocol === 'mysql:' || url.protocol === 'mariadb:') return openMySql(url);
    if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
      throw new CliError(`--database-url must start with postgres://, postgresql://, mysql:// or mariadb://, got ${url.protocol}//`);
    }
    const pg = await importDriver<typeof import('pg')>('pg');
    const pool = new pg.default.Pool({ connectionString: options.databaseUrl, max: 4, connectionTimeoutMillis: 10_000 });
    pool.on('error', () => undefined); // an idle connection dropped by the server: the next query reports it
    return checked(url, pool, { client: pool, kind: 'postgres' });
  }
  const dataDir = options.dataDir ?? DEFAULT_DATA_DIR;
  const { PGlite } = await importDriver<typeof import('@electric-sql/pglite')>('@electric-sql/pglite');
  const unlock = lockDataDir(dataDir);
  try {
    const db = await PGlite.create(dataDir);
    return {
      client: db,
      kind: 'postgres',
      location: dataDir,
      close: async () => {
        await db.close();
        unlock();
      },
    };
  } catch (error) {
    unlock();
    throw new CliError(`cannot open PGlite data directory ${dataDir}: ${describeError(error)}`, { cause: error });
  }
}

/** A MySQL or MariaDB server through mysql2 (an optional peer), checked with one round trip. */
async function openMySql(url: URL): Promise<CliDatabase> {
  const mysql = await importDriver<typeof import('mysql2/promise')>('mysql2/promise');
  const uri = new URL(url);
  uri.protocol = 'mysql:';
  const pool = mysql.createPool({ uri: uri.toString(), connectionLimit: 4, connectTimeout: 10_000 });
  return checked(url, pool, { client: pool as unknown as SqlClient, kind: 'mysql', mysql: pool });
}

/**
 * The database of a server pool, once one round trip answered; its location is the URL without
 * its password. @throws {CliError} when the server cannot be reached
 */
async function checked(
  url: URL,
  pool: { query(sql: string): Promise<unknown>; end(): Promise<void> },
  db: Pick<CliDatabase, 'client' | 'kind' | 'mysql'>,
): Promise<CliDatabase> {
  url.password = '';
  const location = url.toString();
  try {
    await pool.query('SELECT 1');
  } catch (error) {
    await pool.end().catch(() => undefined);
    throw new CliError(`cannot connect to ${location}: ${describeError(error)}`, { cause: error });
  }
  return { ...db, location, close: () => pool.end() };
}

async function importDriver<T>(name: string): Promise<T> {
  try {
    return (await import(name)) as T;
  } catch (error) {
    throw new CliError(`the driver ${name} is not installed: npm install ${name}`, { cause: error });
  }
}

/**
 * One line for any error: node-postgres reports a refused connection as an AggregateError with
 * an empty message (one error per address tried), so fall back to its parts and codes.
 */
export function describeError(error: unknown): string {
  if (error instanceof AggregateError && error.errors.length > 0 && !error.message) {
    return describeError(error.errors[0]);
  }
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    const message = error.message || String(code ?? error.name);
    return message.split('\n')[0]!;
  }
  return String(error);
}
