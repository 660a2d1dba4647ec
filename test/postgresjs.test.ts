/**
 * idem/postgresjs beyond the store contract (which runs on it from test/helpers/stores.ts):
 * the options a driver cannot honour are refused, wait mode wakes through `sql.listen`, and a
 * silent database answers with a StoreTimeoutError at the deadline, on an autocommit statement
 * and inside a phase's transaction (where postgres.js's own ROLLBACK hangs behind it). Real
 * PostgreSQL (DATABASE_URL): postgres.js cannot run on PGlite.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import postgres from 'postgres';
import { InvalidOptionError } from '../src/core/errors.js';
import { SQL_DRIVER, type SqlDriver } from '../src/postgres/client.js';
import { PostgresStore, StoreTimeoutError } from '../src/postgres/index.js';
import { postgresjs } from '../src/postgresjs/index.js';
import { tableName } from './helpers/engines.js';
import { startSilentProxy, type SilentProxy } from './helpers/silent-proxy.js';

const fp = (text: string) => createHash('sha256').update(text).digest();
const claimInput = (key: string) => ({ scope: 's', key, fingerprint: fp(key), leaseMs: 10_000, retentionMs: 86_400_000 });
const quiet = { onnotice: () => undefined };

describe('idem/postgresjs options', () => {
  const sql = postgres('postgres://nobody@127.0.0.1:1/none', quiet); // never connects: nothing here queries

  test('a client with a transform (postgres.camel) is refused: it would rename idem columns', () => {
    const camel = postgres('postgres://nobody@127.0.0.1:1/none', { ...quiet, transform: postgres.camel });
    assert.throws(
      () => postgresjs(camel),
      (e: unknown) => e instanceof InvalidOptionError && e.code === 'IDEM_INVALID_OPTION' && /transform/.test(e.message),
    );
  });

  test('maxPoolWaiting is refused on a driver (the client queues for its own connections)', () => {
    assert.throws(
      () => new PostgresStore({ client: postgresjs(sql), maxPoolWaiting: 8 }),
      (e: unknown) => e instanceof InvalidOptionError && /maxPoolWaiting/.test(e.message),
    );
  });

  test('notify is refused on a driver that cannot listen, accepted on postgres.js', () => {
    const mute: SqlDriver<unknown> = {
      kind: SQL_DRIVER,
      name: 'mute',
      query: () => Promise.resolve({ rows: [] }),
      transaction: (fn) => fn(undefined, { query: () => Promise.resolve({ rows: [] }) }),
    };
    assert.throws(
      () => new PostgresStore({ client: mute, notify: true }),
      (e: unknown) => e instanceof InvalidOptionError && /mute driver/.test(e.message),
    );
    assert.equal(typeof new PostgresStore({ client: postgresjs(sql), notify: true }).subscribe, 'function');
  });

  test('something that is not a postgres.js client is refused', () => {
    assert.throws(() => postgresjs({} as never), InvalidOptionError);
  });
});

describe('idem/postgresjs on PostgreSQL', { skip: process.env.DATABASE_URL ? false : 'needs DATABASE_URL (real PostgreSQL)' }, () => {
  const target = new URL(process.env.DATABASE_URL ?? 'postgres://x@127.0.0.1:5432/x');
  const sql = postgres(process.env.DATABASE_URL ?? '', { ...quiet, max: 4 });
  const tables: string[] = [];
  let proxy: SilentProxy;
  before(async () => {
    proxy = await startSilentProxy({ host: target.hostname, port: Number(target.port || 5432) });
  });
  after(async () => {
    proxy.mode('forward');
    for (const t of tables) {
      await sql.unsafe(`DROP TABLE IF EXISTS "${t}_blobs"`);
      await sql.unsafe(`DROP TABLE IF EXISTS "${t}"`);
      await sql.unsafe(`DROP SEQUENCE IF EXISTS "${t}_lock_version_seq"`);
    }
    await sql.end({ timeout: 5 });
    await proxy.close();
  });

  async function migrated(): Promise<string> {
    const table = tableName('idem_pgjs');
    tables.push(table);
    await new PostgresStore({ client: postgresjs(sql), table }).migrate();
    return table;
  }

  test('wait mode: a subscription to a key is woken by its finish, through sql.listen', async () => {
    const table = await migrated();
    const store = new PostgresStore({ client: postgresjs(sql), table, notify: true });
    const claimed = await store.claim(claimInput('w'));
    assert.equal(claimed.kind, 'claimed');
    const changes = await store.subscribe!('s', 'w'); // resolves once the LISTEN is active
    try {
      assert.equal(await changes.next(0), false, 'nothing changed yet');
      const token = claimed.kind === 'claimed' ? claimed.token : 0;
      const finished = await store.commit({ scope: 's', key: 'w', token }, () => ({
        kind: 'finish',
        response: { status: 201, headers: [], body: new TextEncoder().encode('ok') },
      }));
      assert.equal(finished.kind, 'ok');
      const started = performance.now();
      assert.equal(await changes.next(8_000), true, 'woken by the notification');
      assert.ok(performance.now() - started < 4_000, 'not at the end of the wait');
      assert.ok(changes.seen >= 1);
    } finally {
      changes.close();
    }
  });

  test('an exhausted client: a phase commit fails with StoreTimeoutError at the deadline while it waits for a connection, and the phase never runs', {
    timeout: 30_000,
  }, async () => {
    const table = await migrated();
    const one = postgres(process.env.DATABASE_URL ?? '', { ...quiet, max: 1 });
    const store = new PostgresStore({ client: postgresjs(one), table, storeTimeoutMs: 800 });
    try {
      const claimed = await store.claim(claimInput('exhausted'));
      assert.equal(claimed.kind, 'claimed');
      const ref = { scope: 's', key: 'exhausted', token: claimed.kind === 'claimed' ? claimed.token : 0 };
      const held = await one.reserve(); // the client's only connection, held elsewhere
      let ran = false;
      const started = performance.now();
      await assert.rejects(
        store.commit(
          ref,
          () => ({ kind: 'phase', phase: 'p', result: null, leaseMs: 10_000 }),
          async () => {
            ran = true;
          },
        ),
        StoreTimeoutError,
      );
      assert.ok(performance.now() - started < 800 + 1_500, `commit answered in ${Math.round(performance.now() - started)} ms`);
      held.release();
      // The transaction queued before this statement opens late and must run none of the phase.
      await one`SELECT 1`;
      assert.equal(ran, false, 'a transaction opened after the deadline runs none of the phase');
      const row = await sql.unsafe(`SELECT recovery_point FROM "${table}" WHERE scope = 's' AND key = 'exhausted'`);
      assert.equal(row[0]?.recovery_point, 'start');
    } finally {
      await one.end({ timeout: 0.5 });
    }
  });

  test('a silent database: a claim and a phase commit each fail with StoreTimeoutError at the deadline', { timeout: 30_000 }, async () => {
    const table = await migrated();
    const url = new URL(target);
    url.port = String(proxy.port);
    const viaProxy = postgres(url.toString(), { ...quiet, max: 2 });
    const store = new PostgresStore({ client: postgresjs(viaProxy), table, storeTimeoutMs: 800 });
    try {
      const claimed = await store.claim(claimInput('phase'));
      assert.equal(claimed.kind, 'claimed');
      const ref = { scope: 's', key: 'phase', token: claimed.kind === 'claimed' ? claimed.token : 0 };
      // Inside the phase's transaction the database goes silent: idem's fenced write misses the
      // deadline, and the commit answers although postgres.js's ROLLBACK waits behind it.
      let started = performance.now();
      await assert.rejects(
        store.commit(
          ref,
          () => ({ kind: 'phase', phase: 'p', result: null, leaseMs: 10_000 }),
          async () => proxy.mode('silent'),
        ),
        StoreTimeoutError,
      );
      assert.ok(performance.now() - started < 800 + 1_500, `commit answered in ${Math.round(performance.now() - started)} ms`);
      started = performance.now();
      await assert.rejects(store.claim(claimInput('silent')), StoreTimeoutError);
      assert.ok(performance.now() - started < 800 + 1_000, `claim answered in ${Math.round(performance.now() - started)} ms`);
    } finally {
      proxy.mode('forward');
      await viaProxy.end({ timeout: 0.5 });
    }
  });
});
