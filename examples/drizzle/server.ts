/**
 * `npx tsx examples/drizzle/server.ts`: the Drizzle charge example (app.ts), on embedded
 * PGlite by default (in memory, or persisted in IDEM_DATA_DIR) or on PostgreSQL when
 * DATABASE_URL is set, through node-postgres (DRIZZLE_DRIVER=node-postgres, the default) or
 * postgres.js (DRIZZLE_DRIVER=postgres-js).
 *
 * Environment: PORT (3000; 0 picks a free one), HOST (127.0.0.1), PSP_LATENCY_MS (50),
 * IDEM_LEASE_MS (60000).
 */
import { fileURLToPath } from 'node:url';
import { serve } from '@hono/node-server';
import { createDrizzleApp } from './app.js';
import { FakePsp } from './psp.js';
import { type Database, schema } from './schema.js';

const env = process.env;

/** The Drizzle database on the configured driver, and how to close it. */
async function open(): Promise<{ db: Database; kind: string; migrate(): Promise<void>; close(): Promise<void> }> {
  const migrations = { migrationsFolder: fileURLToPath(new URL('./migrations', import.meta.url)) };
  if (env.DATABASE_URL && env.DRIZZLE_DRIVER === 'postgres-js') {
    const { default: postgres } = await import('postgres');
    const { drizzle } = await import('drizzle-orm/postgres-js');
    const { migrate } = await import('drizzle-orm/postgres-js/migrator');
    const sql = postgres(env.DATABASE_URL, { max: 10, onnotice: () => undefined });
    const db = drizzle(sql, { schema });
    return { db, kind: 'postgres.js', migrate: () => migrate(db, migrations), close: () => sql.end() };
  }
  if (env.DATABASE_URL) {
    const { default: pg } = await import('pg');
    const { drizzle } = await import('drizzle-orm/node-postgres');
    const { migrate } = await import('drizzle-orm/node-postgres/migrator');
    const pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 10 });
    pool.on('error', (error) => console.error(`drizzle example: idle database connection lost: ${error.message}`));
    const db = drizzle(pool, { schema });
    return { db, kind: 'node-postgres', migrate: () => migrate(db, migrations), close: () => pool.end() };
  }
  const { PGlite } = await import('@electric-sql/pglite');
  const { drizzle } = await import('drizzle-orm/pglite');
  const { migrate } = await import('drizzle-orm/pglite/migrator');
  const client = await PGlite.create(env.IDEM_DATA_DIR);
  const db = drizzle(client, { schema });
  return { db, kind: `pglite ${env.IDEM_DATA_DIR ?? 'in memory'}`, migrate: () => migrate(db, migrations), close: () => client.close() };
}

const database = await open();
try {
  const { app, store } = createDrizzleApp({
    db: database.db,
    psp: new FakePsp(database.db, Number(env.PSP_LATENCY_MS ?? 50)),
    leaseMs: env.IDEM_LEASE_MS ? Number(env.IDEM_LEASE_MS) : undefined,
  });
  await store.migrate();
  await database.migrate();
  const host = env.HOST ?? '127.0.0.1';
  const server = serve({ fetch: app.fetch, port: Number(env.PORT ?? 3000), hostname: host }, (info) => {
    console.log(`idem drizzle example listening on http://${host}:${info.port} (${database.kind})`);
  });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => server.close(() => void database.close().finally(() => process.exit(0))));
  }
} catch (error) {
  console.error(`idem drizzle example: cannot start: ${(error as Error).message ?? error}`);
  await database.close();
  process.exit(1);
}
