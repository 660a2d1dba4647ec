/**
 * Store entries for the factory list (test/helpers/stores.ts) of the query builders and ORMs
 * of issue 14 that helper F covers: `PostgresStore` on Kysely (`idem/kysely`; on PGlite through
 * Kysely's PGliteDialect and on PostgreSQL through its PostgresDialect on a pg.Pool) and on
 * Prisma (`idem/prisma`, Prisma 7 with @prisma/adapter-pg, PostgreSQL only).
 *
 * Each wraps the plain PostgreSQL entry on the same backend: the same table and SQL backdoors on
 * the raw client, but the store under test runs through the driver, and `effect` (and
 * `staleInTx`) write through the client's own API on the phase's `tx` (Kysely `insertInto`,
 * a Prisma model `create`), so the contract's "a fenced phase leaves no business row" and "a
 * throwing effect leaves no recovery point" hold for rows the ORM wrote.
 */
import { type Generated, Kysely, PGliteDialect, PostgresDialect, sql, type Transaction } from 'kysely';
import type { PGlite } from '@electric-sql/pglite';
import { PrismaPg } from '@prisma/adapter-pg';
import type pg from 'pg';
import { PostgresStore } from '../../src/postgres/index.js';
import type { Queryable, SqlClient } from '../../src/postgres/client.js';
import { kysely } from '../../src/kysely/index.js';
import { prisma } from '../../src/prisma/index.js';
import type { PrismaClient } from './prisma/generated/client.js';
import { generatePrismaClient } from './prisma/generate.js';
import type { StoreFactory, StoreHarness } from './stores.js';

/** Every test table's `_side` table, as Kysely sees it. */
export type EffectsDB = Record<string, { id: Generated<number>; note: string }>;

/** Prisma's interactive transaction client of the test schema. */
export type PrismaTx = Parameters<Parameters<PrismaClient['$transaction']>[0]>[0];

/** How one client opens on the backend's raw client and writes the harness's business row. */
interface Orm<Tx> {
  open(client: SqlClient): Promise<{
    store(table: string): PostgresStore<Tx>;
    /** The business write on the phase's `tx`; `run` is the test's table. */
    effect(tx: Tx, run: string, note: string): Promise<void>;
    /** The notes that took hold; default: the `_side` table. */
    effects?(run: string): Promise<string[]>;
    /** What `drop` removes besides the plain harness's tables. */
    drop?(run: string): Promise<void>;
    /** Makes the token stale inside `tx` (as a takeover would). */
    stale(tx: Tx, table: string, scope: string, key: string): Promise<void>;
    close(): Promise<void>;
  }>;
}

const q = (client: SqlClient): Queryable => client as Queryable;

/** The plain entry's harness with the store, effects and stale write of `orm`. */
function ormFactory<Tx>(name: string, plain: StoreFactory, orm: Orm<Tx>, contractOnly = false): StoreFactory {
  return {
    name,
    contractOnly,
    capabilities: plain.capabilities,
    async connect() {
      const backend = await plain.connect();
      const client = backend.client!;
      const opened = await orm.open(client);
      return {
        client,
        async close() {
          await opened.close();
          await backend.close();
        },
        async fresh() {
          const base = (await backend.fresh()) as StoreHarness<Queryable>;
          const table = (base.store as PostgresStore).table;
          const store = opened.store(table);
          const harness: StoreHarness<Tx> = {
            ...base,
            store,
            sweep: (options) => store.sweep(options),
            effect: (note) => async (tx) => {
              await opened.effect(tx, table, note);
              return { note };
            },
            effects: opened.effects ? () => opened.effects!(table) : base.effects,
            staleInTx: (tx, scope, key) => opened.stale(tx, table, scope, key),
            async sweepKey(scope, key) {
              await base.age(scope, key, 60 * 60_000);
              await base.setLease(scope, key, -1000);
              return store.sweep({ retentionMs: 60_000 });
            },
            async drop() {
              await opened.drop?.(table);
              await base.drop();
            },
          };
          return harness as unknown as StoreHarness;
        },
      };
    },
  };
}

/** Kysely on the backend: PGliteDialect on a PGlite, PostgresDialect on a pg.Pool. */
function kyselyOrm(on: 'pglite' | 'postgres'): Orm<Transaction<EffectsDB>> {
  return {
    async open(client) {
      // Neither dialect is destroyed: `db.destroy()` would close the backend's PGlite or pool.
      const dialect = on === 'pglite' ? new PGliteDialect({ pglite: client as unknown as PGlite }) : new PostgresDialect({ pool: client as unknown as pg.Pool });
      const db = new Kysely<EffectsDB>({ dialect });
      return {
        store: (table) => new PostgresStore({ client: kysely(db), table }),
        async effect(tx, run, note) {
          await tx.insertInto(`${run}_side`).values({ note }).execute();
        },
        async stale(tx, table, scope, key) {
          await sql`UPDATE ${sql.table(table)} SET lock_version = lock_version + 1 WHERE scope = ${scope} AND key = ${key}`.execute(tx);
        },
        close: async () => undefined,
      };
    },
  };
}

/** The Prisma model `Effect`'s table, shared by all Prisma tests (rows told apart by `run`). */
const PRISMA_EFFECTS = 'idem_test_prisma_effects';

/** Prisma 7 on @prisma/adapter-pg over the backend's pg.Pool. */
const prismaOrm: Orm<PrismaTx> = {
  async open(client) {
    generatePrismaClient();
    const { PrismaClient } = await import('./prisma/generated/client.js'); // generated above, so not imported statically
    const db = new PrismaClient({ adapter: new PrismaPg(client as unknown as pg.Pool) });
    // One statement list in one transaction: parallel test files create the table once.
    await q(client).query(
      `BEGIN; SELECT pg_advisory_xact_lock(hashtext('${PRISMA_EFFECTS}'));
       CREATE TABLE IF NOT EXISTS ${PRISMA_EFFECTS} (id serial PRIMARY KEY, run text NOT NULL, note text NOT NULL);
       CREATE INDEX IF NOT EXISTS ${PRISMA_EFFECTS}_run ON ${PRISMA_EFFECTS} (run); COMMIT`,
    );
    // A loaded two-core machine can hold a phase's transaction past Prisma's 5 s default.
    const driver = prisma(db, { transaction: { maxWait: 10_000, timeout: 60_000 } });
    return {
      store: (table) => new PostgresStore({ client: driver, table }),
      async effect(tx, run, note) {
        await tx.effect.create({ data: { run, note } });
      },
      effects: async (run) => (await q(client).query(`SELECT note FROM ${PRISMA_EFFECTS} WHERE run = $1 ORDER BY id`, [run])).rows.map((r) => String(r.note)),
      async drop(run) {
        await q(client).query(`DELETE FROM ${PRISMA_EFFECTS} WHERE run = $1`, [run]);
      },
      async stale(tx, table, scope, key) {
        await tx.$executeRawUnsafe(`UPDATE "${table}" SET lock_version = lock_version + 1 WHERE scope = $1 AND key = $2`, scope, key);
      },
      close: () => db.$disconnect(),
    };
  },
};

/**
 * The entries: Kysely on PGlite (contract only: the engine and HTTP suites run on the
 * PostgreSQL entries), and with DATABASE_URL Kysely and Prisma on PostgreSQL.
 * @param plain the plain PostgresStore entry on PGlite or PostgreSQL, whose backdoors these reuse
 */
export function ormStoreFactories(plain: (name: string, on: 'pglite' | 'postgres') => StoreFactory): StoreFactory[] {
  const entries = [ormFactory('PostgresStore via Kysely on PGlite', plain('Kysely on PGlite', 'pglite'), kyselyOrm('pglite'), true)];
  if (process.env.DATABASE_URL) {
    entries.push(
      ormFactory('PostgresStore via Kysely on PostgreSQL', plain('Kysely on PostgreSQL', 'postgres'), kyselyOrm('postgres')),
      ormFactory('PostgresStore via Prisma on PostgreSQL', plain('Prisma on PostgreSQL', 'postgres'), prismaOrm),
    );
  }
  return entries;
}
