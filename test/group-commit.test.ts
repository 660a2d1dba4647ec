/**
 * Group commit on PostgreSQL (protocol.md K19): what only a batch can show. The whole store
 * contract also runs with it on (test/helpers/stores.ts, "group commit" entries). A batch is
 * observed twice over: `onBatch` reports each statement, and rows written by one statement share
 * one transaction id (`xmin`), which the database assigns, not the store.
 */
import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { InvalidOptionError } from '../src/core/errors.js';
import { type GroupBatch, PostgresStore, type PostgresStoreOptions, StoreTimeoutError } from '../src/postgres/index.js';
import type { ClaimResult } from '../src/store/types.js';
import { tableName } from './helpers/engines.js';
import { claimedToken, claimInput, existing, fp, LONG_LEASE_MS, RETENTION_MS, SCOPE } from './contracts/store/shared.js';

const response = (n: number) => ({
  status: 201,
  headers: [['content-type', 'application/json']] as Array<[string, string]>,
  body: new TextEncoder().encode(`{"n":${n}}`),
});

describe('group commit on PostgreSQL (protocol.md K19)', { skip: process.env.DATABASE_URL ? false : 'needs DATABASE_URL (real PostgreSQL)' }, () => {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 8 });
  const tables: string[] = [];
  let batches: GroupBatch[] = [];

  /** A migrated store with group commit on (a wide window: everything a test fires at once joins one batch). */
  async function open(options: Partial<PostgresStoreOptions> = {}, groupCommit: PostgresStoreOptions['groupCommit'] = {}) {
    const table = tableName('idem_gc');
    tables.push(table);
    const gc = typeof groupCommit === 'object' ? { windowMs: 20, ...groupCommit, onBatch: (b: GroupBatch) => batches.push(b) } : groupCommit;
    const store = new PostgresStore({ client: pool, table, ...options, groupCommit: gc });
    await store.migrate();
    return { store, table };
  }
  const xmins = async (table: string, keys: string[]) =>
    new Set((await pool.query(`SELECT xmin::text AS x FROM "${table}" WHERE key = ANY($1::text[])`, [keys])).rows.map((r) => String(r.x)));
  const ref = (key: string, token: number) => ({ scope: SCOPE, key, token });

  before(() => undefined);
  afterEach(() => {
    batches = [];
  });
  after(async () => {
    for (const t of tables) {
      await pool.query(`DROP TABLE IF EXISTS "${t}_blobs"; DROP TABLE IF EXISTS "${t}"; DROP SEQUENCE IF EXISTS "${t}_lock_version_seq"`);
    }
    await pool.end();
  });

  it('claims of distinct keys fired together land in one statement and one transaction, each caller with its own token', async () => {
    const { store, table } = await open();
    const keys = Array.from({ length: 12 }, (_, i) => `k${i}`);
    const results = await Promise.all(keys.map((k) => store.claim(claimInput(k))));
    const tokens = results.map(claimedToken);
    assert.equal(new Set(tokens).size, keys.length, 'every caller got a token of its own');
    assert.deepEqual(
      batches.map((b) => [b.kind, b.size, b.failed]),
      [['claim', 12, false]],
    );
    assert.equal((await xmins(table, keys)).size, 1, 'one transaction wrote every row');
    for (const [i, k] of keys.entries())
      assert.equal(Number((await pool.query(`SELECT lock_version FROM "${table}" WHERE key = $1`, [k])).rows[0]!.lock_version), tokens[i]);

    batches = [];
    const finished = await Promise.all(keys.map((k, i) => store.commit(ref(k, tokens[i]!), () => ({ kind: 'finish', response: response(i) }))));
    assert.ok(finished.every((f) => f.kind === 'ok'));
    assert.deepEqual(
      batches.map((b) => [b.kind, b.size]),
      [['finish', 12]],
    );
    assert.equal((await xmins(table, keys)).size, 1, 'one transaction finished every row');
    for (const [i, k] of keys.entries()) {
      const record = await store.get(SCOPE, k, RETENTION_MS);
      assert.deepEqual(record?.response, response(i), `key ${k} replays its own response`);
    }
  });

  it('windowMs 0 gathers the claims of one turn of the event loop', async () => {
    const { store, table } = await open({}, { windowMs: 0 });
    const keys = ['z1', 'z2', 'z3', 'z4'];
    await Promise.all(keys.map((k) => store.claim(claimInput(k))));
    assert.deepEqual(
      batches.map((b) => b.size),
      [4],
    );
    assert.equal((await xmins(table, keys)).size, 1);
  });

  it('a batch is cut at maxBatch keys', async () => {
    const { store } = await open({}, { maxBatch: 4 });
    await Promise.all(Array.from({ length: 10 }, (_, i) => store.claim(claimInput(`m${i}`))));
    assert.deepEqual(batches.map((b) => b.size).sort(), [2, 4, 4]);
  });

  it('duplicates of one key in one batch: exactly one wins, the others see it in progress; a replay and a mismatch in the same batch', async () => {
    const { store } = await open();
    const done = claimedToken(await store.claim(claimInput('done')));
    await store.commit(ref('done', done), () => ({ kind: 'finish', response: response(7) }));
    batches = [];
    const results: ClaimResult[] = await Promise.all([
      store.claim(claimInput('dup')),
      store.claim(claimInput('dup')),
      store.claim(claimInput('dup', { fingerprint: fp(2) })),
      store.claim(claimInput('other')),
      store.claim(claimInput('done')),
    ]);
    const dup = results.slice(0, 3);
    assert.equal(dup.filter((r) => r.kind === 'claimed').length, 1, 'one claim of the key won');
    for (const r of dup.filter((r) => r.kind === 'exists')) assert.equal(existing(r).state, 'started');
    const winner = dup.findIndex((r) => r.kind === 'claimed');
    for (const r of dup.filter((r) => r.kind === 'exists')) {
      assert.deepEqual(existing(r).fingerprint, winner === 2 ? fp(2) : fp(1), "each loser reads the winner's fingerprint (a mismatch is told apart)");
    }
    claimedToken(results[3]!);
    assert.deepEqual(existing(results[4]!).response, response(7), 'the finished key replays from the batch');
    assert.equal(batches.filter((b) => b.kind === 'claim')[0]!.size, 3, 'one batch held dup once, other and done; the other dups went alone');
  });

  it('a finish whose token is stale is fenced inside its batch, the others in it finish', async () => {
    const { store } = await open();
    const tokens = await Promise.all(['f1', 'f2', 'f3'].map(async (k) => claimedToken(await store.claim(claimInput(k, { leaseMs: 0 })))));
    const taken = await store.takeOver(ref('f2', tokens[1]!), LONG_LEASE_MS);
    assert.equal(taken.kind, 'taken');
    batches = [];
    const outcomes = await Promise.all(['f1', 'f2', 'f3'].map((k, i) => store.commit(ref(k, tokens[i]!), () => ({ kind: 'finish', response: response(i) }))));
    assert.deepEqual(
      outcomes.map((o) => o.kind),
      ['ok', 'fenced', 'ok'],
    );
    assert.deepEqual(
      batches.map((b) => [b.kind, b.size]),
      [['finish', 3]],
    );
    const f2 = await store.get(SCOPE, 'f2', RETENTION_MS);
    assert.equal(f2?.state, 'started', 'the stale finish changed nothing');
    assert.equal(f2?.token, (taken as { token: number }).token);
  });

  it('a batch statement that fails on one row commits nothing; each caller then goes alone, only the bad key fails', async () => {
    const { store, table } = await open();
    await pool.query(`CREATE FUNCTION "${table}_boom"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$`);
    await pool.query(`CREATE TRIGGER boom_insert BEFORE INSERT ON "${table}" FOR EACH ROW WHEN (NEW.key = 'boom') EXECUTE FUNCTION "${table}_boom"()`);
    const results = await Promise.allSettled(['a', 'boom', 'b'].map((k) => store.claim(claimInput(k))));
    assert.equal(results[0]!.status, 'fulfilled');
    assert.match(String((results[1] as PromiseRejectedResult).reason), /boom/);
    assert.equal(results[2]!.status, 'fulfilled');
    assert.deepEqual(
      batches.map((b) => [b.kind, b.size, b.failed]),
      [['claim', 3, true]],
    );
    const keys = (await pool.query(`SELECT key FROM "${table}" ORDER BY key`)).rows.map((r) => r.key);
    assert.deepEqual(keys, ['a', 'b'], 'no key consumed by the failed batch: boom can be claimed once the cause is gone');

    await pool.query(
      `CREATE TRIGGER boom_finish BEFORE UPDATE ON "${table}" FOR EACH ROW WHEN (NEW.key = 'b' AND NEW.state = 'done') EXECUTE FUNCTION "${table}_boom"()`,
    );
    const [a, , b] = results.map((r) => (r.status === 'fulfilled' ? claimedToken(r.value) : 0));
    batches = [];
    const finishes = await Promise.allSettled([
      store.commit(ref('a', a!), () => ({ kind: 'finish', response: response(1) })),
      store.commit(ref('b', b!), () => ({ kind: 'finish', response: response(2) })),
    ]);
    assert.deepEqual(finishes[0], { status: 'fulfilled', value: { kind: 'ok', value: undefined } });
    assert.match(String((finishes[1] as PromiseRejectedResult).reason), /boom/);
    assert.equal((await store.get(SCOPE, 'b', RETENTION_MS))?.state, 'started');
    assert.equal((await store.get(SCOPE, 'a', RETENTION_MS))?.state, 'done');
  });

  it('a batch past storeTimeoutMs fails every caller with StoreTimeoutError, once', async () => {
    const { store, table } = await open({ storeTimeoutMs: 500 });
    const locker = await pool.connect();
    try {
      await locker.query('BEGIN');
      await locker.query(`LOCK TABLE "${table}" IN ACCESS EXCLUSIVE MODE`);
      const started = performance.now();
      const results = await Promise.allSettled(['t1', 't2', 't3'].map((k) => store.claim(claimInput(k))));
      for (const r of results) assert.ok(r.status === 'rejected' && r.reason instanceof StoreTimeoutError, String((r as PromiseRejectedResult).reason));
      assert.ok(performance.now() - started < 5000, 'one deadline, not one per caller in turn');
      assert.deepEqual(
        batches.map((b) => [b.size, b.failed]),
        [[3, true]],
      );
    } finally {
      await locker.query('ROLLBACK');
      locker.release();
    }
  });

  it('in wait mode (notify) claims batch and finishes go alone, each sending its notification (protocol.md K17)', async () => {
    const { store } = await open({ notify: true });
    const tokens = (await Promise.all(['w1', 'w2'].map((k) => store.claim(claimInput(k))))).map(claimedToken);
    const changes = await store.subscribe!(SCOPE, 'w1');
    try {
      const woken = changes.next(30_000);
      await Promise.all(['w1', 'w2'].map((k, i) => store.commit(ref(k, tokens[i]!), () => ({ kind: 'finish', response: response(i) }))));
      assert.equal(await woken, true, "w1's finish woke its subscriber");
      assert.deepEqual(
        batches.map((b) => [b.kind, b.size]),
        [['claim', 2]],
      );
    } finally {
      changes.close();
    }
  });

  it('rejects bad options with InvalidOptionError, and partitioned mode', () => {
    const bad: Array<Partial<PostgresStoreOptions>> = [
      { groupCommit: { windowMs: -1 } },
      { groupCommit: { windowMs: 1001 } },
      { groupCommit: { maxBatch: 0 } },
      { groupCommit: { maxBatch: 1.5 } },
      { groupCommit: { windowMs: 100 }, storeTimeoutMs: 100 },
      { groupCommit: true, partitioned: true },
      { groupCommit: 'yes' as unknown as boolean },
    ];
    for (const options of bad) assert.throws(() => new PostgresStore({ client: pool, ...options }), InvalidOptionError, JSON.stringify(options));
    assert.ok(new PostgresStore({ client: pool, groupCommit: true }));
  });
});
