/**
 * Opens the example's database: PostgreSQL when DATABASE_URL is set, otherwise embedded
 * PGlite persisted in IDEM_DATA_DIR (default ./.idem-data), so `npm start` needs no server.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Queryable, SqlClient } from '../../src/postgres/index.js';

export interface Database {
  /** The client to hand to PostgresStore (a pg.Pool or a PGlite instance). */
  client: SqlClient & Queryable;
  /** `postgres` or `pglite`, for the banner. */
  kind: 'postgres' | 'pglite';
  /** Where the data lives (URL without password, or the data directory). */
  location: string;
  close(): Promise<void>;
}

export async function openDatabase(env: NodeJS.ProcessEnv = process.env): Promise<Database> {
  if (env.DATABASE_URL) {
    const { default: pg } = await import('pg');
    const pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: Number(env.PG_POOL_MAX ?? 20) });
    // An idle connection that breaks (server restart, network cut) is dropped from the pool;
    // without a listener node-postgres would crash the process with it.
    pool.on('error', (error) => console.error(`payments: idle database connection lost: ${error.message}`));
    const url = new URL(env.DATABASE_URL);
    url.password = '';
    return { client: pool, kind: 'postgres', location: url.toString(), close: () => pool.end() };
  }
  const { PGlite } = await import('@electric-sql/pglite');
  const dataDir = env.IDEM_DATA_DIR ?? './.idem-data';
  const unlock = lockDataDir(dataDir);
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

/**
 * PGlite is one PostgreSQL backend inside this process: a second process opening the same
 * directory would run its own, unaware of the first one's claims, and both would execute
 * the same key (and lose data on close). So one process per directory: a pid file, taken
 * with O_EXCL. A pid file whose process is gone (killed, crashed) is taken over at once, so a
 * restart right after a crash works; a lock file with mtime-based staleness would make that
 * restart wait.
 *
 * @returns a function that releases the lock
 * @throws {Error} when a live process holds the directory
 */
function lockDataDir(dataDir: string): () => void {
  mkdirSync(dataDir, { recursive: true });
  const file = join(dataDir, 'idem-example.pid');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx' });
      return () => rmSync(file, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holder = Number(readFileSync(file, 'utf8'));
      if (holder && holder !== process.pid && alive(holder)) {
        throw new Error(
          `${dataDir} is in use by process ${holder}: PGlite allows one process per data directory. ` +
            'Stop it, or set IDEM_DATA_DIR to another directory, or DATABASE_URL to share a PostgreSQL.',
        );
      }
      rmSync(file, { force: true }); // left by a process that is gone
    }
  }
  throw new Error(`Could not lock ${dataDir}`);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
