/**
 * What the Kysely and Prisma drivers (idem/kysely, idem/prisma) do beyond the store contract,
 * engine and HTTP suites they run in (test/helpers/orm-stores.ts): results as node-postgres
 * gives them (int8 and numeric as strings, counts of statements without rows), a Kysely with
 * a column-renaming plugin, bad clients refused. Kysely on PGlite always; Kysely and Prisma
 * on PostgreSQL when DATABASE_URL is set.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pglite } from './helpers/pglite.js';
import { PrismaPg } from '@prisma/adapter-pg';
import { CamelCasePlugin, Kysely, PGliteDialect, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { InvalidOptionError } from '../src/core/errors.js';
import { kysely } from '../src/kysely/index.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { SqlDriver } from '../src/postgres/client.js';
import { prisma } from '../src/prisma/index.js';
import { tableName } from './helpers/engines.js';
import { generatePrismaClient } from './helpers/prisma/generate.js';

interface Backend {
  name: string;
  open(): Promise<{ driver: SqlDriver<unknown>; close(): Promise<void> }>;
}

const backends: Backend[] = [
  {
    name: 'Kysely on PGlite',
    async open() {
      const db = new Kysely<Record<string, never>>({ dialect: new PGliteDialect({ pglite: pglite() }) });
      return { driver: kysely(db) as SqlDriver<unknown>, close: () => db.destroy() };
    },
  },
];
if (process.env.DATABASE_URL) {
  backends.push(
    {
      name: 'Kysely on PostgreSQL',
      async open() {
        const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: process.env.DATABASE_URL }) }) });
        return { driver: kysely(db) as SqlDriver<unknown>, close: () => db.destroy() };
      },
    },
    {
      name: 'Prisma on PostgreSQL',
      async open() {
        generatePrismaClient();
        const { PrismaClient } = await import('./helpers/prisma/generated/client.js');
        const client = new PrismaClient({ adapter: new PrismaPg({ connectionString: process.env.DATABASE_URL! }) });
        return { driver: prisma(client) as SqlDriver<unknown>, close: () => client.$disconnect() };
      },
    },
  );
}

for (const backend of backends) {
  describe(`driver: ${backend.name}`, () => {
    let driver: SqlDriver<unknown>;
    let close: () => Promise<void>;
    before(async () => ({ driver, close } = await backend.open()));
    after(() => close());

    it('gives rows with node-postgres value types: int8 and numeric as strings, bytea as bytes, jsonb parsed, timestamptz a Date', async () => {
      const { rows } = await driver.query(
        `SELECT 9007199254740993::int8 AS big, 1.50::numeric AS dec, 7::int4 AS small, $1::bytea AS b, $2::jsonb AS j, now() AS t, true AS yes, NULL::text AS none`,
        [new Uint8Array([0, 1, 255]), JSON.stringify({ a: [1, 'x'] })],
      );
      const row = rows[0]!;
      // PGlite reads int8 as a bigint, and Kysely passes its dialect's values on (as idem's PGlite path gets them).
      assert.equal(row.big, backend.name.includes('PGlite') ? 9007199254740993n : '9007199254740993');
      assert.equal(typeof row.dec, 'string');
      assert.equal(Number(row.dec), 1.5); // Prisma's Decimal drops the trailing zero of '1.50'
      assert.equal(row.small, 7);
      assert.ok(row.b instanceof Uint8Array);
      assert.deepEqual([...(row.b as Uint8Array)], [0, 1, 255]);
      assert.deepEqual(row.j, { a: [1, 'x'] });
      assert.ok(row.t instanceof Date);
      assert.equal(row.yes, true);
      assert.equal(row.none, null);
    });

    it('counts the rows of a statement that returns none (rowCount), and returns the rows of one with RETURNING', async () => {
      const t = tableName('idem_test_driver');
      await driver.query(`CREATE TABLE "${t}" (id int PRIMARY KEY)`);
      try {
        assert.equal((await driver.query(`INSERT INTO "${t}" SELECT generate_series(1, 5)`)).rowCount, 5);
        assert.equal((await driver.query(`DELETE FROM "${t}" WHERE id <= $1`, [2])).rowCount, 2);
        const returned = await driver.query(`DELETE FROM "${t}" WHERE id = $1 RETURNING id`, [3]);
        assert.deepEqual(returned.rows, [{ id: 3 }]);
        assert.equal(returned.rowCount, 1);
      } finally {
        await driver.query(`DROP TABLE "${t}"`);
      }
    });

    it('runs a SELECT of a void function (the advisory lock idem’s migrate and partitioned claim take)', async () => {
      await driver.transaction(async (_tx, q) => void (await q.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, ['idem_test_driver'])));
    });

    it('commits idem’s statements and the client’s own with the transaction, and rolls both back on a throw', async () => {
      const t = tableName('idem_test_driver');
      await driver.query(`CREATE TABLE "${t}" (note text)`);
      try {
        await driver.transaction(async (_tx, q) => void (await q.query(`INSERT INTO "${t}" VALUES ($1)`, ['kept'])));
        const boom = new Error('boom');
        await assert.rejects(
          driver.transaction(async (_tx, q) => {
            await q.query(`INSERT INTO "${t}" VALUES ($1)`, ['lost']);
            throw boom;
          }),
          (error) => error === boom,
        );
        assert.deepEqual((await driver.query(`SELECT note FROM "${t}"`)).rows, [{ note: 'kept' }]);
      } finally {
        await driver.query(`DROP TABLE "${t}"`);
      }
    });

    it('refuses notify: true (no LISTEN through the client): an InvalidOptionError at construction', () => {
      assert.throws(() => new PostgresStore({ client: driver, notify: true }), InvalidOptionError);
    });
  });
}

describe('idem/kysely', () => {
  it('runs idem’s statements past the instance’s plugins, while a phase’s tx keeps them (CamelCasePlugin)', async () => {
    const db = new Kysely<{ notes: { noteText: string } }>({ dialect: new PGliteDialect({ pglite: pglite() }), plugins: [new CamelCasePlugin()] });
    try {
      const store = new PostgresStore({ client: kysely(db) });
      await store.migrate();
      await sql`CREATE TABLE notes (note_text text)`.execute(db);
      const claimed = await store.claim({ scope: 's', key: 'k', fingerprint: new Uint8Array(32), leaseMs: 60_000, retentionMs: 60_000 });
      assert.equal(claimed.kind, 'claimed');
      const ref = { scope: 's', key: 'k', token: (claimed as { token: number }).token };
      const done = await store.commit(
        ref,
        (value) => ({ kind: 'phase', phase: 'p', result: value, leaseMs: 60_000 }),
        async (tx) => {
          await tx.insertInto('notes').values({ noteText: 'camel' }).execute();
          return (await tx.selectFrom('notes').selectAll().execute())[0];
        },
      );
      assert.deepEqual(done, { kind: 'ok', value: { noteText: 'camel' } }, 'the user’s tx maps note_text to noteText');
      const record = await store.get('s', 'k', 60_000);
      assert.equal(record?.recoveryPoint, 'p', 'idem read recovery_point unrenamed');
      assert.deepEqual(record?.phaseResults, { p: { noteText: 'camel' } });
    } finally {
      await db.destroy();
    }
  });

  it('refuses a Transaction and anything not a Kysely instance with a TypeError', async () => {
    const db = new Kysely<Record<string, never>>({ dialect: new PGliteDialect({ pglite: pglite() }) });
    try {
      await db.transaction().execute(async (trx) => {
        assert.throws(() => kysely(trx as never), /not a Transaction/);
      });
      assert.throws(() => kysely({} as never), TypeError);
    } finally {
      await db.destroy();
    }
  });
});

describe('idem/prisma', () => {
  it('a phase’s model create commits with the recovery point, and is rolled back when the phase is fenced', {
    skip: !process.env.DATABASE_URL && 'needs DATABASE_URL',
  }, async () => {
    generatePrismaClient();
    const { PrismaClient } = await import('./helpers/prisma/generated/client.js');
    const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
    const client = new PrismaClient({ adapter: new PrismaPg(pool) });
    const table = tableName();
    // Past Prisma's 5 s default: on a loaded machine migrate's dozen DDL statements in one transaction can take longer.
    const store = new PostgresStore({ client: prisma(client, { transaction: { maxWait: 10_000, timeout: 60_000 } }), table });
    try {
      // The model's table is fixed by the schema and shared: one creation across parallel files.
      await pool.query(`BEGIN; SELECT pg_advisory_xact_lock(hashtext('idem_test_prisma_effects'));
        CREATE TABLE IF NOT EXISTS idem_test_prisma_effects (id serial PRIMARY KEY, run text NOT NULL, note text NOT NULL); COMMIT`);
      await store.migrate();
      const claimed = await store.claim({ scope: 's', key: 'k', fingerprint: new Uint8Array(32), leaseMs: 60_000, retentionMs: 60_000 });
      const ref = { scope: 's', key: 'k', token: (claimed as { token: number }).token };
      const record = (phase: string) => (value: unknown) => ({ kind: 'phase' as const, phase, result: value, leaseMs: 60_000 });
      const kept = await store.commit(ref, record('p1'), (tx) => tx.effect.create({ data: { run: table, note: 'kept' } }));
      assert.equal(kept.kind, 'ok');
      const fenced = await store.commit(ref, record('p2'), async (tx) => {
        await tx.effect.create({ data: { run: table, note: 'fenced' } });
        // A takeover racing this phase, in its transaction: the fenced write then matches no row.
        await tx.$executeRawUnsafe(`UPDATE "${table}" SET lock_version = lock_version + 1 WHERE scope = $1 AND key = $2`, 's', 'k');
      });
      assert.deepEqual(fenced, { kind: 'fenced' });
      const notes = await client.effect.findMany({ where: { run: table }, orderBy: { id: 'asc' } });
      assert.deepEqual(
        notes.map((n) => n.note),
        ['kept'],
        'the fenced phase left no row',
      );
      assert.equal((await store.get('s', 'k', 60_000))?.recoveryPoint, 'p1');
    } finally {
      await pool.query(`DELETE FROM idem_test_prisma_effects WHERE run = $1`, [table]);
      await pool.query(`DROP TABLE IF EXISTS "${table}_blobs"; DROP TABLE IF EXISTS "${table}"; DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
      await client.$disconnect();
      await pool.end();
    }
  });

  it('refuses anything not a PrismaClient with a TypeError', () => {
    assert.throws(() => prisma({ $queryRawUnsafe() {} } as never), /PrismaClient/);
    assert.throws(() => prisma(null as never), TypeError);
  });
});
