/**
 * PostgresStore through `idem/drizzle` for the store factory list (test/helpers/stores.ts):
 * Drizzle on node-postgres and on postgres.js (real PostgreSQL, DATABASE_URL) and on PGlite.
 * The store runs on the Drizzle database and a phase's `tx` is Drizzle's transaction; the
 * contract's business effect is a row inserted with Drizzle's query builder on it
 * (`tx.insert(side)`), so "a fenced phase leaves no row" and "a throwing effect leaves no
 * recovery point" are checked on what Drizzle wrote. The other backdoors are SQL on the
 * driver's own client, as for the plain PostgreSQL entries.
 */
import { pglite } from './pglite.js';
import { type SQL, sql } from 'drizzle-orm';
import { drizzle as onNodePostgres } from 'drizzle-orm/node-postgres';
import { type PgDatabase, type PgQueryResultHKT, pgTable, serial, text } from 'drizzle-orm/pg-core';
import { drizzle as onPglite } from 'drizzle-orm/pglite';
import { drizzle as onPostgresJs } from 'drizzle-orm/postgres-js';
import pg from 'pg';
import postgres from 'postgres';
import { drizzle } from '../../src/drizzle/index.js';
import type { Queryable, SqlClient } from '../../src/postgres/client.js';
import { postgresjs } from '../../src/postgresjs/index.js';
import { type PostgresClient, postgresFactory, type StoreFactory } from './stores.js';

/** Any Drizzle PostgreSQL database; its transaction is what the phases get. */
type Database = PgDatabase<PgQueryResultHKT>;
type Tx = Parameters<Parameters<Database['transaction']>[0]>[0];

/** `text` with `$1…` placeholders as Drizzle SQL, the parameters bound (never interpolated). */
function bound(text: string, params: unknown[]): SQL {
  return sql.join(text.split(/\$(\d+)/).map((part, i) => (i % 2 === 1 ? sql`${params[Number(part) - 1]}` : sql.raw(part))));
}

/** The store on `drizzle(db)`; the backdoors' SQL on `client` (the same database). */
function onDrizzle(db: Database, client: { sql: Queryable; raw?: SqlClient }, close: () => Promise<void>): PostgresClient<Tx> {
  return {
    client: drizzle(db),
    ...client,
    insert: async (tx, side, note) => {
      const table = pgTable(side, { id: serial('id').primaryKey(), note: text('note').notNull() });
      await tx.insert(table).values({ note });
    },
    inTx: (tx, text, params) => tx.execute(bound(text, params)),
    close,
  };
}

/** Drizzle on node-postgres (a pg.Pool) on PostgreSQL. */
const openNodePostgres = async () => {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 20 });
  return onDrizzle(onNodePostgres(pool), { sql: pool, raw: pool }, () => pool.end());
};

/** Drizzle on postgres.js on PostgreSQL; the backdoors go through idem/postgresjs on the same client. */
const openPostgresJs = async () => {
  const client = postgres(process.env.DATABASE_URL!, { max: 20, onnotice: () => undefined });
  // Drizzle first: it sets the client's parsers (timestamptz as text) before anything queries.
  const db = onPostgresJs(client);
  return onDrizzle(db, { sql: postgresjs(client) }, () => client.end({ timeout: 5 }));
};

/** Drizzle on PGlite. */
const openPglite = async () => {
  const client = pglite();
  await client.waitReady;
  return onDrizzle(onPglite(client), { sql: client, raw: client }, () => client.close());
};

/**
 * The Drizzle entries: on PGlite always (the contract only: the engine and HTTP suites on PGlite
 * take minutes and run on the plain PGlite entry, and on Drizzle through the PostgreSQL
 * entries), on PostgreSQL through node-postgres and postgres.js when DATABASE_URL is set.
 */
export function drizzleFactories(): StoreFactory[] {
  return [
    postgresFactory('PostgresStore via Drizzle on PGlite', openPglite, false, true),
    ...(process.env.DATABASE_URL
      ? [
          postgresFactory('PostgresStore via Drizzle (node-postgres) on PostgreSQL', openNodePostgres, false),
          postgresFactory('PostgresStore via Drizzle (postgres.js) on PostgreSQL', openPostgresJs, false),
        ]
      : []),
  ];
}
