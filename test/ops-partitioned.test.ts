/**
 * Partitioned mode: the table range-partitioned by created_at (one partition per UTC day),
 * the claim that keeps (scope, key) unique across partitions (a key created just before
 * midnight and retried after it), fenced writes across partitions, partitions created ahead
 * and dropped whole. PGlite always, real PostgreSQL when DATABASE_URL is set (there also with
 * concurrent claims across the boundary). The store contract (test/store.test.ts) also runs
 * against a partitioned table.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { engines, freshStore, tableName, useEngine } from './helpers/engines.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { Queryable } from '../src/postgres/client.js';
import type { ClaimInput, ClaimResult } from '../src/store/types.js';
import { InvalidOptionError } from '../src/core/errors.js';

/** Long enough that a row from just before last midnight is within retention. */
const RETENTION_MS = 48 * 3600_000;
const fp = (n: number) => new Uint8Array(32).fill(n);
const input = (key: string, overrides: Partial<ClaimInput> = {}): ClaimInput => ({
  scope: 'tenant',
  key,
  fingerprint: fp(1),
  leaseMs: 60_000,
  retentionMs: RETENTION_MS,
  ...overrides,
});
const token = (r: ClaimResult) => {
  assert.equal(r.kind, 'claimed', `expected a claim, got ${JSON.stringify(r)}`);
  return (r as { token: number }).token;
};
const utcDay = (offsetDays: number) => {
  const d = new Date();
  d.setUTCHours(0, 0, 0, 0);
  d.setUTCDate(d.getUTCDate() + offsetDays);
  return d.toISOString().slice(0, 10);
};
const partitionOf = (table: string, day: string) => `${table}_p${day.replaceAll('-', '')}`;

for (const engine of engines) {
  describe(`partitioned mode (${engine.name})`, () => {
    const db = useEngine(engine);
    const q = () => db.client() as unknown as Queryable;
    const fresh = async () => {
      const ctx = await freshStore(db.client(), undefined, { partitioned: true });
      db.cleanup(ctx.drop);
      return ctx;
    };
    /** The partition a key's row lives in, and how many rows the key has. */
    const whereIs = async (table: string, key: string) => {
      const rows = (await q().query(`SELECT tableoid::regclass::text AS part FROM "${table}" WHERE key = $1`, [key])).rows;
      return rows.map((r) => String(r.part).replaceAll('"', ''));
    };
    /** Moves a key's row to 1 ms before last midnight (UTC): into yesterday's partition. */
    const beforeMidnight = async (table: string, key: string) => {
      await q().query(
        `UPDATE "${table}" SET created_at = date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '1 millisecond'
         WHERE key = $1`,
        [key],
      );
    };

    it('migrate creates the partitioned table and daily partitions from yesterday to daysAhead; again, nothing', async () => {
      const table = tableName();
      const store = new PostgresStore({ client: db.client(), table, partitioned: { daysAhead: 3 } });
      db.cleanup(async () => void (await q().query(`DROP TABLE IF EXISTS "${table}"; DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`)));
      const first = await store.migrate();
      assert.equal(first.table, 'created');
      assert.deepEqual(
        first.partitionsCreated,
        [-1, 0, 1, 2, 3].map((d) => partitionOf(table, utcDay(d))),
      );
      assert.deepEqual(await store.migrate(), { table: 'exists', partitionsCreated: [] }, 'idempotent');
      assert.deepEqual(await store.maintain(), [], 'maintain has nothing to do');
      assert.equal(await store.tableMode(), 'partitioned');
      const kind = (await q().query(`SELECT relkind::text AS k FROM pg_class WHERE relname = $1`, [table])).rows[0]?.k;
      assert.equal(kind, 'p', 'a partitioned table');
    });

    it('refuses a table made in the other mode, naming the fix', async () => {
      const plain = await freshStore(db.client());
      db.cleanup(plain.drop);
      await assert.rejects(new PostgresStore({ client: db.client(), table: plain.table, partitioned: true }).migrate(), (e: unknown) => {
        assert.ok(e instanceof InvalidOptionError, 'InvalidOptionError');
        assert.match((e as Error).message, /is not partitioned: migrate it first/);
        return true;
      });
      const { table } = await fresh();
      await assert.rejects(new PostgresStore({ client: db.client(), table }).migrate(), /is partitioned: open the store with \{ partitioned: true \}/);
    });

    it('a key created just before midnight and retried after it: one row, the same claim, replayed', async () => {
      const { store, table } = await fresh();
      const t1 = token(await store.claim(input('k')));
      await beforeMidnight(table, 'k');
      assert.deepEqual(await whereIs(table, 'k'), [partitionOf(table, utcDay(-1))], "the row lives in yesterday's partition");

      // The retry after midnight finds it (a plain unique index could not see across partitions).
      const again = await store.claim(input('k'));
      assert.equal(again.kind, 'exists', 'the retry finds the row from before midnight');
      assert.equal((again as { record: { token: number } }).record.token, t1);
      assert.deepEqual(await whereIs(table, 'k'), [partitionOf(table, utcDay(-1))], 'still one row, not a second one today');

      // Every fenced write reaches the row in yesterday's partition.
      const ref = { scope: 'tenant', key: 'k', token: t1 };
      assert.deepEqual(await store.extendLease(ref, 60_000), { kind: 'ok', value: undefined });
      assert.equal((await store.commit(ref, () => ({ kind: 'phase', phase: 'p1', result: { a: 1 }, leaseMs: 60_000 }))).kind, 'ok');
      assert.deepEqual(await store.release(ref), { kind: 'ok', value: 'released' });
      const taken = await store.takeOver(ref, 60_000);
      assert.equal(taken.kind, 'taken');
      const t2 = (taken as { token: number }).token;
      assert.deepEqual(
        await store.commit(ref, () => ({ kind: 'phase', phase: 'late', result: null, leaseMs: 60_000 })),
        { kind: 'fenced' },
        'the old token is fenced',
      );
      const body = new Uint8Array([1, 2, 3]);
      const finished = await store.commit({ ...ref, token: t2 }, () => ({ kind: 'finish', response: { status: 201, headers: [], body } }));
      assert.equal(finished.kind, 'ok');
      const replay = await store.claim(input('k'));
      assert.equal(replay.kind, 'exists');
      const record = (replay as { record: { state: string; response?: { body: Uint8Array }; phaseResults: unknown } }).record;
      assert.equal(record.state, 'done');
      assert.deepEqual(Array.from(record.response!.body), [1, 2, 3], 'the response replays');
      assert.deepEqual(record.phaseResults, { p1: { a: 1 } });
      assert.equal((await store.get('tenant', 'k', RETENTION_MS))?.state, 'done');
      assert.deepEqual(await whereIs(table, 'k'), [partitionOf(table, utcDay(-1))]);
    });

    it('a discarded key from before midnight can be claimed again today', async () => {
      const { store, table } = await fresh();
      const t1 = token(await store.claim(input('k')));
      await beforeMidnight(table, 'k');
      assert.deepEqual(await store.discard({ scope: 'tenant', key: 'k', token: t1 }), { kind: 'ok', value: 'deleted' });
      const t2 = token(await store.claim(input('k', { fingerprint: fp(2) })));
      assert.ok(t2 > t1, 'a higher token');
      assert.deepEqual(await whereIs(table, 'k'), [partitionOf(table, utcDay(0))]);
    });

    it("a row from before midnight past retention is replaced by one row in today's partition", async () => {
      const { store, table } = await fresh();
      const t1 = token(await store.claim(input('k', { leaseMs: 0 })));
      await beforeMidnight(table, 'k');
      const shortRetention = 1000; // the row is at least a second old now
      const t2 = token(await store.claim(input('k', { fingerprint: fp(2), retentionMs: shortRetention })));
      assert.ok(t2 > t1, `replacement token ${t2} > ${t1}`);
      assert.deepEqual(await whereIs(table, 'k'), [partitionOf(table, utcDay(0))], 'old row deleted, new row today');
      assert.deepEqual(await store.commit({ scope: 'tenant', key: 'k', token: t1 }, () => ({ kind: 'phase', phase: 'x', result: null, leaseMs: 1 })), {
        kind: 'fenced',
      });
    });

    it('sweep drops each expired partition in one statement (no row deletes) and keeps the rest', async () => {
      const { store, table } = await fresh();
      // Two rows in yesterday's partition, one today.
      await store.claim(input('old-1', { leaseMs: 0 }));
      await store.claim(input('old-2', { leaseMs: 0 }));
      await store.claim(input('new', { leaseMs: 0 }));
      await beforeMidnight(table, 'old-1');
      await beforeMidnight(table, 'old-2');
      // Count row deletes: a statement trigger on the parent fires for any DELETE, none for a DROP.
      await q().query(`CREATE TABLE "${table}_deletes" (n int)`);
      db.cleanup(async () => void (await q().query(`DROP TABLE IF EXISTS "${table}_deletes"; DROP FUNCTION IF EXISTS "${table}_fn"() CASCADE`)));
      await q().query(
        `CREATE FUNCTION "${table}_fn"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO "${table}_deletes" VALUES (1); RETURN NULL; END $$`,
      );
      await q().query(`CREATE TRIGGER "${table}_trg" AFTER DELETE ON "${table}" FOR EACH STATEMENT EXECUTE FUNCTION "${table}_fn"()`);

      const plan = await store.sweepPlan(60_000);
      assert.deepEqual(plan.expiredPartitions, [partitionOf(table, utcDay(-1))]);
      const report = await store.sweepReport({ retentionMs: 60_000 });
      assert.deepEqual(report.droppedPartitions, [partitionOf(table, utcDay(-1))]);
      assert.equal(report.deleted, 2, 'the rows the partition held');
      assert.equal(Number((await q().query(`SELECT count(*)::int AS n FROM "${table}_deletes"`)).rows[0]!.n), 0, 'no DELETE ran');
      const parts = (await store.stats(60_000)).partitions!.map((p) => p.name);
      assert.ok(!parts.includes(partitionOf(table, utcDay(-1))), "yesterday's partition is gone");
      assert.ok(parts.includes(partitionOf(table, utcDay(0))), "today's stays");
      assert.deepEqual(
        (await q().query(`SELECT key FROM "${table}"`)).rows.map((r) => r.key),
        ['new'],
      );
      assert.equal(await store.sweep({ retentionMs: 60_000 }), 0, 'nothing left to drop');
    });

    it('keeps an expired partition while a lease in it is valid, drops it once the lease ended', async () => {
      const { store, table } = await fresh();
      await store.claim(input('worker-alive'));
      await beforeMidnight(table, 'worker-alive');
      const report = await store.sweepReport({ retentionMs: 60_000 });
      assert.deepEqual(report.droppedPartitions, []);
      assert.deepEqual(report.keptPartitions, [partitionOf(table, utcDay(-1))]);
      assert.equal((await whereIs(table, 'worker-alive')).length, 1);
      await q().query(`UPDATE "${table}" SET locked_until = now() - interval '1 second'`);
      assert.equal(await store.sweep({ retentionMs: 60_000 }), 1);
    });

    it('a claim on a day without a partition fails with a message naming the fix', async () => {
      const { store, table } = await fresh();
      await q().query(`DROP TABLE "${partitionOf(table, utcDay(0))}"`);
      await assert.rejects(store.claim(input('k')), /no partition of .* for today \(UTC\): run store\.maintain\(\)/);
      assert.deepEqual(await store.maintain(), [partitionOf(table, utcDay(0))], 'maintain recreates it');
      token(await store.claim(input('k')));
    });

    if (engine.name === 'postgres') {
      it('concurrent retries of a key from before midnight: none claims, all see the one row', async () => {
        const { store, table } = await fresh();
        const t1 = token(await store.claim(input('k')));
        await beforeMidnight(table, 'k');
        const results = await Promise.all(Array.from({ length: 30 }, () => store.claim(input('k'))));
        assert.deepEqual(
          results.map((r) => r.kind),
          Array(30).fill('exists'),
        );
        for (const r of results) assert.equal((r as { record: { token: number } }).record.token, t1);
        assert.equal((await whereIs(table, 'k')).length, 1, 'one row');
      });

      it('concurrent claims of a row past retention from before midnight: exactly one replaces it', async () => {
        const { store, table } = await fresh();
        token(await store.claim(input('k', { leaseMs: 0 })));
        await beforeMidnight(table, 'k');
        const results = await Promise.all(Array.from({ length: 30 }, () => store.claim(input('k', { retentionMs: 1000 }))));
        assert.equal(results.filter((r) => r.kind === 'claimed').length, 1, 'one claim');
        assert.deepEqual(await whereIs(table, 'k'), [partitionOf(table, utcDay(0))], 'one row, today');
      });
    }
  });
}
