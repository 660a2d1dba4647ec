/**
 * PostgresStore through `idem/drizzle` for the store factory list (test/helpers/stores.ts):
 * Drizzle on node-postgres and on postgres.js (real PostgreSQL, DATABASE_URL) and on PGlite.
 * The store runs on the Drizzle database; a phase's `tx` is Drizzle's transaction, and the
 * contract's business effect is a row inserted with Drizzle's query builder on it
 * (`tx.insert(side)`), so "a fenced phase leaves no row" and "a throwing effect leaves no
 * recovery point" are checked on what Drizzle wrote. The other backdoors (age a key, read its
 * token, …) are those of the plain PostgreSQL entry, on the driver's own client.
 */
import { PGlite } from '@electric-sql/pglite';
import { sql } from 'drizzle-orm';
import { drizzle as onNodePostgres } from 'drizzle-orm/node-postgres';
import { type PgDatabase, type PgQueryResultHKT, pgTable, serial, text } from 'drizzle-orm/pg-core';
import { drizzle as onPglite } from 'drizzle-orm/pglite';
import { drizzle as onPostgresJs } from 'drizzle-orm/postgres-js';
import pg from 'pg';
import postgres from 'postgres';
import { drizzle } from '../../src/drizzle/index.js';
import type { SqlClient } from '../../src/postgres/client.js';
import { PostgresStore } from '../../src/postgres/index.js';
import { postgresFactory, type StoreFactory, type StoreHarness } from './stores.js';

/** Any Drizzle PostgreSQL database; its transaction is what the phases get. */
type Database = PgDatabase<PgQueryResultHKT>;
type Tx = Parameters<Parameters<Database['transaction']>[0]>[0];

/** A Drizzle database, and the same connection as a SqlClient for the backdoors' SQL. */
interface Opened {
  db: Database;
  client: SqlClient;
  close(): Promise<void>;
}

/**
 * The plain PostgreSQL entry's harness with the store and the two transaction backdoors
 * (`effect`, `staleInTx`) on Drizzle instead.
 */
function drizzleFactory(name: string, open: () => Promise<Opened>, contractOnly = false): StoreFactory {
  let opened: Opened | undefined;
  const base = postgresFactory(name, async () => (opened = await open()), false, contractOnly);
  return {
    ...base,
    async connect() {
      const backend = await base.connect();
      const driver = drizzle(opened!.db);
      return {
        ...backend,
        async fresh() {
          const plain = await backend.fresh();
          const table = (plain.store as PostgresStore<unknown>).table;
          const store = new PostgresStore({ client: driver, table });
          const side = pgTable(`${table}_side`, { id: serial('id').primaryKey(), note: text('note').notNull() });
          const harness: StoreHarness<Tx> = {
            ...(plain as StoreHarness<unknown>),
            store,
            sweep: (options) => store.sweep(options),
            effect: (note) => async (tx) => {
              await tx.insert(side).values({ note });
              return { note };
            },
            async staleInTx(tx, scope, key) {
              await tx.execute(sql`UPDATE ${sql.identifier(table)} SET lock_version = lock_version + 1 WHERE scope = ${scope} AND key = ${key}`);
            },
          };
          return harness as StoreHarness;
        },
      };
    },
  };
}

const url = () => process.env.DATABASE_URL!;

/** Drizzle on node-postgres (a pg.Pool) on PostgreSQL. */
export const drizzleNodePostgresFactory = drizzleFactory('PostgresStore via Drizzle (node-postgres) on PostgreSQL', async () => {
  const pool = new pg.Pool({ connectionString: url(), max: 20 });
  return { db: onNodePostgres(pool), client: pool as SqlClient, close: () => pool.end() };
});

/** Drizzle on postgres.js on PostgreSQL; the backdoors use a pg.Pool beside it. */
export const drizzlePostgresJsFactory = drizzleFactory('PostgresStore via Drizzle (postgres.js) on PostgreSQL', async () => {
  const sql = postgres(url(), { max: 20, onnotice: () => undefined });
  const pool = new pg.Pool({ connectionString: url(), max: 4 });
  return {
    db: onPostgresJs(sql),
    client: pool as SqlClient,
    async close() {
      await sql.end();
      await pool.end();
    },
  };
});

/**
 * Drizzle on PGlite. Contract only: the engine and HTTP suites on PGlite take minutes and run
 * on the plain PGlite entry, and on Drizzle through the two PostgreSQL entries.
 */
export const drizzlePgliteFactory = drizzleFactory(
  'PostgresStore via Drizzle on PGlite',
  async () => {
    const client = new PGlite();
    await client.waitReady;
    return { db: onPglite(client), client: client as SqlClient, close: () => client.close() };
  },
  true,
);

/** The Drizzle entries: on PGlite always, on PostgreSQL when DATABASE_URL is set. */
export function drizzleFactories(): StoreFactory[] {
  return [drizzlePgliteFactory, ...(process.env.DATABASE_URL ? [drizzleNodePostgresFactory] : [])];
}
