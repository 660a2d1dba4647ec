/**
 * The example's idempotency store: PostgreSQL when DATABASE_URL is set, else an in-memory
 * PGlite (kept out of Next's bundle by serverExternalPackages in next.config.mjs). The table
 * is IDEM_TABLE (default `idem_next_example`), created when the server loads this module.
 */
import { PostgresStore, type SqlClient } from 'idem/postgres';

async function open(): Promise<SqlClient> {
  if (process.env.DATABASE_URL) {
    const pg = (await import('pg')).default;
    return new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 });
  }
  const { PGlite } = await import('@electric-sql/pglite');
  const db = new PGlite();
  await db.waitReady;
  return db;
}

export const client = await open();
export const store = new PostgresStore({ client, table: process.env.IDEM_TABLE ?? 'idem_next_example' });
await store.migrate();
