/**
 * What idem/drizzle does beyond the store contract (which runs on its entries in
 * test/helpers/drizzle-stores.ts): wait mode through the driver under Drizzle (LISTEN on the
 * pool, postgres.js's `listen`, PGlite's `listen`), and the databases it refuses. On PGlite
 * always, on PostgreSQL through node-postgres and postgres.js when DATABASE_URL is set.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import { drizzle as onNodePostgres } from 'drizzle-orm/node-postgres';
import { drizzle as onPglite } from 'drizzle-orm/pglite';
import { drizzle as onPostgresJs } from 'drizzle-orm/postgres-js';
import pg from 'pg';
import postgres from 'postgres';
import { drizzle } from '../src/drizzle/index.js';
import { postgresjs } from '../src/postgresjs/index.js';
import { PostgresStore } from '../src/postgres/index.js';
import { tableName } from './helpers/engines.js';
import { claimedToken, claimInput, empty, finishWith, LONG_LEASE_MS, SCOPE } from './contracts/store/shared.js';

interface Opened {
  name: string;
  open(): Promise<{ driver: ReturnType<typeof drizzle>; close(): Promise<void> }>;
}

const drivers: Opened[] = [
  {
    name: 'PGlite',
    async open() {
      const client = await PGlite.create();
      return { driver: drizzle(onPglite(client)), close: () => client.close() };
    },
  },
];
if (process.env.DATABASE_URL) {
  const url = process.env.DATABASE_URL;
  drivers.push(
    {
      name: 'node-postgres',
      async open() {
        const pool = new pg.Pool({ connectionString: url, max: 4 });
        return { driver: drizzle(onNodePostgres(pool)), close: () => pool.end() };
      },
    },
    {
      name: 'postgres.js',
      async open() {
        const sql = postgres(url, { max: 4, onnotice: () => undefined });
        return { driver: drizzle(onPostgresJs(sql)), close: () => sql.end({ timeout: 5 }) };
      },
    },
  );
}

for (const { name, open } of drivers) {
  describe(`idem/drizzle on ${name}`, () => {
    const opened = open();
    after(async () => (await opened).close());

    test('wait mode: a subscription to a key wakes when its finish commits', async () => {
      const { driver } = await opened;
      const table = tableName('idem_drizzle_wait');
      const store = new PostgresStore({ client: driver, table, notify: true });
      await store.migrate();
      try {
        const token = claimedToken(await store.claim(claimInput('k')));
        const changes = await store.subscribe!(SCOPE, 'k');
        try {
          const woken = changes.next(60_000);
          assert.equal((await store.commit({ scope: SCOPE, key: 'k', token }, finishWith(empty(201)))).kind, 'ok');
          assert.equal(await woken, true, 'woken by the NOTIFY of the finish, long before the timeout');
        } finally {
          changes.close();
        }
      } finally {
        await driver.query(`DROP TABLE IF EXISTS "${table}" CASCADE`);
        await driver.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
      }
    });
  });
}

describe('idem/drizzle refuses', () => {
  test('what is not a Drizzle database, and a node-postgres one on a single pg.Client', () => {
    assert.throws(() => drizzle({} as never), TypeError);
    assert.throws(() => drizzle(onNodePostgres(new pg.Client())), /single pg.Client cannot run concurrent transactions/);
  });
});

describe('idem/postgresjs and Drizzle on one postgres.js client', { skip: process.env.DATABASE_URL ? false : 'needs DATABASE_URL (real PostgreSQL)' }, () => {
  test('a store made on the client before Drizzle was made on it still records phases (JSON parameters asked per statement)', async () => {
    const sql = postgres(process.env.DATABASE_URL ?? '', { max: 2, onnotice: () => undefined });
    const table = tableName('idem_pgjs_then_drizzle');
    const store = new PostgresStore({ client: postgresjs(sql), table });
    onPostgresJs(sql); // Drizzle's driver changes the client's json serializers
    try {
      await store.migrate();
      const token = claimedToken(await store.claim(claimInput('k')));
      const ref = { scope: SCOPE, key: 'k', token };
      assert.equal(
        (
          await store.commit(
            ref,
            () => ({ kind: 'phase', phase: 'p', result: { n: 1 }, leaseMs: LONG_LEASE_MS }),
            async () => 'x',
          )
        ).kind,
        'ok',
      );
      const record = await store.get(SCOPE, 'k', 60_000);
      assert.deepEqual(record?.phaseResults, { p: { n: 1 } });
    } finally {
      await sql.unsafe(`DROP TABLE IF EXISTS "${table}" CASCADE`);
      await sql.unsafe(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
      await sql.end({ timeout: 1 });
    }
  });
});
