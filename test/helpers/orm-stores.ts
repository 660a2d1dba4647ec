/**
 * Store entries for the factory list (test/helpers/stores.ts) of the query builder and ORM of
 * issue 14 that this file covers: `PostgresStore` on Kysely (`idem/kysely`; on PGlite through
 * Kysely's PGliteDialect, on PostgreSQL through its PostgresDialect on a pg.Pool) and on Prisma
 * (`idem/prisma`, Prisma 7 on @prisma/adapter-pg; PostgreSQL only: Prisma has no PGlite
 * adapter of its own).
 *
 * The backdoors are SQL on the pool or PGlite under the client; `insert` (the contract's
 * business row) and `inTx` (its token move inside a commit) go through the client's own API on
 * the phase's `tx`: Kysely's `insertInto` and `executeQuery`, Prisma's `$executeRaw` template
 * and `$executeRawUnsafe`. (A Prisma model `create` needs a table fixed in the schema, unlike
 * the contract's table per test: test/kysely-prisma.test.ts fences one.)
 */
import { pglite } from './pglite.js';
import { PrismaPg } from '@prisma/adapter-pg';
import { CompiledQuery, type Generated, Kysely, PGliteDialect, PostgresDialect, type Transaction } from 'kysely';
import pg from 'pg';
import type { SqlClient } from '../../src/postgres/client.js';
import { kysely } from '../../src/kysely/index.js';
import { prisma } from '../../src/prisma/index.js';
import type { PrismaClient } from './prisma/generated/client.js';
import { generatePrismaClient } from './prisma/generate.js';
import type { PostgresClient, StoreFactory } from './stores.js';

/** Every test table's `_side` table, as Kysely sees it. */
export type EffectsDB = Record<string, { id: Generated<number>; note: string }>;

/** Prisma's interactive transaction client of the test schema (a phase's `tx` on Prisma). */
export type PrismaTx = Parameters<Parameters<PrismaClient['$transaction']>[0]>[0];

/** Kysely on the SQL client `raw` (a PGlite or a pg.Pool), which the backdoors use too. */
function kyselyClient(dialect: PGliteDialect | PostgresDialect, raw: SqlClient, close: () => Promise<void>): PostgresClient<Transaction<EffectsDB>> {
  // db.destroy() is not called: it would close `raw` under the backdoors; `close` does.
  const db = new Kysely<EffectsDB>({ dialect });
  return {
    client: kysely(db),
    raw,
    sql: raw,
    insert: async (tx, side, note) => void (await tx.insertInto(side).values({ note }).execute()),
    inTx: (tx, text, params) => tx.executeQuery(CompiledQuery.raw(text, params)),
    close,
  };
}

const openKyselyPglite = async (): Promise<PostgresClient<Transaction<EffectsDB>>> => {
  const db = pglite();
  await db.waitReady;
  return kyselyClient(new PGliteDialect({ pglite: db }), db as SqlClient, () => db.close());
};

const openKyselyPostgres = async (): Promise<PostgresClient<Transaction<EffectsDB>>> => {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 20 });
  return kyselyClient(new PostgresDialect({ pool }), pool as SqlClient, () => pool.end());
};

/** Prisma 7 on @prisma/adapter-pg over a pg.Pool the backdoors share; the client generated first. */
const openPrisma = async (): Promise<PostgresClient<PrismaTx>> => {
  generatePrismaClient();
  const { PrismaClient, Prisma } = await import('./prisma/generated/client.js'); // generated just now: no static import
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 20 });
  const db = new PrismaClient({ adapter: new PrismaPg(pool) });
  return {
    // A loaded two-core machine can hold a phase's transaction past Prisma's 5 s default.
    client: prisma(db, { transaction: { maxWait: 10_000, timeout: 60_000 } }),
    raw: pool as SqlClient,
    sql: pool as SqlClient,
    insert: async (tx, side, note) => void (await tx.$executeRaw`INSERT INTO ${Prisma.raw(`"${side}"`)} (note) VALUES (${note})`),
    inTx: (tx, text, params) => tx.$executeRawUnsafe(text, ...params),
    async close() {
      await db.$disconnect();
      await pool.end();
    },
  };
};

/** `postgresFactory` of stores.ts (passed in: this module imports only types from there). */
type PostgresFactory = <Tx>(name: string, open: () => Promise<PostgresClient<Tx>>, partitioned: boolean, contractOnly?: boolean) => StoreFactory;

/**
 * The entries: Kysely on PGlite (contract only: the engine and HTTP suites run on the
 * PostgreSQL entries), and with DATABASE_URL Kysely and Prisma on PostgreSQL (every suite), and
 * partitioned (contract only).
 */
export function ormStoreFactories(postgresFactory: PostgresFactory): StoreFactory[] {
  return [
    postgresFactory('PostgresStore on Kysely (PGlite)', openKyselyPglite, false, true),
    ...(process.env.DATABASE_URL
      ? [
          postgresFactory('PostgresStore on Kysely (PostgreSQL)', openKyselyPostgres, false),
          postgresFactory('PostgresStore on Prisma (PostgreSQL)', openPrisma, false),
          // Partitioned mode runs idem's own transactions (claim under an advisory lock, migrate, sweep) through the driver.
          postgresFactory('PostgresStore (partitioned) on Kysely (PostgreSQL)', openKyselyPostgres, true, true),
          postgresFactory('PostgresStore (partitioned) on Prisma (PostgreSQL)', openPrisma, true, true),
        ]
      : []),
  ];
}
