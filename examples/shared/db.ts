/**
 * The database every HTTP example runs on when started directly: a pg.Pool at DATABASE_URL,
 * else an in-memory PGlite (nothing to install or start). Both are what `PostgresStore` takes.
 */
// #region db
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Queryable, SqlClient } from 'idem/postgres';

export async function openDb(): Promise<SqlClient & Queryable> {
  if (!process.env.DATABASE_URL) return (await import('@electric-sql/pglite')).PGlite.create();
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({
    connectionString: process.env.DATABASE_URL,
    max: 10,
    connectionTimeoutMillis: 2000, // a silent database fails fast instead of hanging
    query_timeout: 5000, // your own statements too (the connection is then destroyed)
  });
  pool.on('error', (error) => console.error('idle database connection lost', error.message));
  return pool;
}
// #endregion db

/** True when `url` (a module's import.meta.url) is the script node was started with. */
export const isMain = (url: string): boolean => process.argv[1] !== undefined && fileURLToPath(url) === path.resolve(process.argv[1]);
