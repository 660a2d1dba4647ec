/**
 * The retention sweeper as a library call on a plain table (`PostgresStore.sweepReport`,
 * `sweepPlan`), and the operator reads `inspect` and `stats`: on PGlite always, on real
 * PostgreSQL when DATABASE_URL is set (there also with concurrent sweepers and a live row lock).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { engines, freshStore, useEngine } from './helpers/engines.js';
import type { Queryable } from '../src/postgres/client.js';
import { PostgresStore, type SweepProgress } from '../src/postgres/index.js';

const RETENTION_MS = 60_000;
const fp = new Uint8Array(32).fill(3);

for (const engine of engines) {
  describe(`sweep on a plain table (${engine.name})`, () => {
    const db = useEngine(engine);
    const q = () => db.client() as unknown as Queryable;

    /** A fresh store whose table holds `expired` rows past retention and `live` fresh ones. */
    const seeded = async (expired: number, live: number) => {
      const ctx = await freshStore(db.client());
      db.cleanup(ctx.drop);
      // Expired rows with one shared created_at in pairs, so batches must break ties by key.
      await q().query(
        `INSERT INTO "${ctx.table}" (scope, key, fingerprint, state, created_at)
         SELECT 's' || (i % 3), 'old-' || lpad(i::text, 6, '0'), $2, 'done', now() - interval '2 hours' - (i / 2) * interval '1 second'
         FROM generate_series(1, $1::int) AS i`,
        [expired, fp],
      );
      await q().query(`INSERT INTO "${ctx.table}" (scope, key, fingerprint) SELECT 's', 'live-' || i, $2 FROM generate_series(1, $1::int) AS i`, [live, fp]);
      return ctx;
    };
    const keysLeft = async (table: string) => (await q().query(`SELECT key FROM "${table}" ORDER BY key`)).rows.map((r) => String(r.key));

    it('deletes exactly the rows past retention, in batches by key range, and reports progress', async () => {
      const { store, table } = await seeded(25, 4);
      const progress: SweepProgress[] = [];
      // Batches of 7 end inside a pair of rows with one created_at: the cursor must break the tie by key.
      const report = await store.sweepReport({ retentionMs: RETENTION_MS, batchSize: 7, onProgress: (p) => progress.push(p) });
      assert.equal(report.deleted, 25, 'every expired row deleted');
      assert.equal(report.scanned, 25);
      assert.equal(report.batches, 4, 'batches of 7, 7, 7 and 4');
      assert.deepEqual(
        progress.map((p) => p.deleted),
        [7, 14, 21, 25],
        'progress after each batch',
      );
      assert.equal(report.timedOut, false);
      assert.ok(report.cutoff.getTime() < Date.now() - RETENTION_MS + 60_000, `cutoff ${report.cutoff.toISOString()} is now - retention`);
      assert.deepEqual(await keysLeft(table), ['live-1', 'live-2', 'live-3', 'live-4']);
      assert.equal(await store.sweep({ retentionMs: RETENTION_MS }), 0, 'a second sweep finds nothing');
    });

    it('keeps a row past retention whose lease is valid, and moves past it (no endless batch)', async () => {
      const { store, table } = await seeded(6, 0);
      await q().query(`UPDATE "${table}" SET state = 'started', locked_until = now() + interval '1 minute' WHERE key IN ('old-000002', 'old-000005')`);
      const report = await store.sweepReport({ retentionMs: RETENTION_MS, batchSize: 2 });
      assert.equal(report.deleted, 4);
      assert.equal(report.scanned, 6, 'the leased rows were looked at once each');
      assert.deepEqual(await keysLeft(table), ['old-000002', 'old-000005']);
    });

    it('stops starting batches after maxDurationMs and says so; the next run continues', async () => {
      const { store, table } = await seeded(30, 0);
      const report = await store.sweepReport({ retentionMs: RETENTION_MS, batchSize: 5, maxDurationMs: 0 });
      assert.equal(report.timedOut, true, 'timed out');
      assert.equal(report.deleted, 0, 'no batch started after the deadline');
      assert.equal((await keysLeft(table)).length, 30);
      assert.equal(await store.sweep({ retentionMs: RETENTION_MS, batchSize: 5 }), 30);
    });

    it('plans without deleting: expired, sweepable (lease not valid) and the cutoff', async () => {
      const { store, table } = await seeded(7, 3);
      await q().query(`UPDATE "${table}" SET locked_until = now() + interval '1 minute' WHERE key = 'old-000001'`);
      const plan = await store.sweepPlan(RETENTION_MS);
      assert.deepEqual({ expired: plan.expired, sweepable: plan.sweepable, partitions: plan.expiredPartitions }, { expired: 7, sweepable: 6, partitions: [] });
      assert.equal((await keysLeft(table)).length, 10, 'nothing deleted');
    });

    it('rejects a batch size that is not a whole number >= 1', async () => {
      const { store } = await seeded(0, 0);
      for (const batchSize of [0, -1, 1.5, Number.NaN]) {
        await assert.rejects(store.sweepReport({ batchSize }), /batchSize must be an integer >= 1/, `batchSize ${batchSize}`);
      }
    });

    it('inspects a key past retention, with lease, token and response summary', async () => {
      const { store, table } = await seeded(0, 0);
      const claimed = await store.claim({ scope: 'tenant', key: 'k', fingerprint: fp, leaseMs: 60_000, retentionMs: RETENTION_MS });
      assert.equal(claimed.kind, 'claimed');
      const token = (claimed as { token: number }).token;
      let view = await store.inspect('tenant', 'k', RETENTION_MS);
      assert.equal(view?.state, 'started');
      assert.equal(view?.leaseExpired, false);
      assert.ok(view!.leaseRemainingMs > 0, 'lease left');
      assert.equal(view?.token, String(token));
      assert.equal(view?.response, null);
      await store.commit({ scope: 'tenant', key: 'k', token }, () => ({
        kind: 'finish',
        response: { status: 201, headers: [['content-type', 'application/json']], body: new Uint8Array(1234) },
      }));
      await q().query(`UPDATE "${table}" SET created_at = now() - interval '1 hour'`);
      view = await store.inspect('tenant', 'k', RETENTION_MS);
      assert.deepEqual(view?.response, { status: 201, headers: [['content-type', 'application/json']], bytes: 1234, storage: 'inline', keyId: null });
      assert.equal(view?.state, 'done');
      assert.equal(view?.recoveryPoint, 'finished');
      assert.equal(view?.retentionExpired, true, 'shown although past retention');
      assert.equal(view?.fingerprint, '03'.repeat(32));
      assert.equal(await store.inspect('tenant', 'absent'), undefined);
    });

    it('counts rows by state, the oldest, expired-but-unswept, abandoned and live leases', async () => {
      const { store, table } = await seeded(5, 3);
      await q().query(`UPDATE "${table}" SET locked_until = now() - interval '1 second' WHERE key = 'live-1'`); // abandoned
      await q().query(`UPDATE "${table}" SET locked_until = now() + interval '1 minute' WHERE key = 'live-2'`); // live
      const stats = await store.stats(RETENTION_MS);
      assert.deepEqual(
        { total: stats.total, started: stats.started, done: stats.done, expired: stats.expiredUnswept, abandoned: stats.abandoned, live: stats.liveLeases },
        { total: 8, started: 3, done: 5, expired: 5, abandoned: 2, live: 1 },
        'live-3 has no lease (NULL): abandoned as well',
      );
      const oldest = (await q().query(`SELECT min(created_at) AS m FROM "${table}"`)).rows[0]!.m as Date;
      assert.equal(stats.oldest?.getTime(), new Date(oldest).getTime());
    });
  });

  if (engine.name !== 'postgres') continue;

  describe('sweep concurrency on a real server', () => {
    const db = useEngine(engine);
    const q = () => db.client() as unknown as Queryable;

    it('two sweepers at once delete every expired row exactly once between them', async () => {
      const ctx = await freshStore(db.client());
      db.cleanup(ctx.drop);
      await q().query(
        `INSERT INTO "${ctx.table}" (scope, key, fingerprint, state, created_at)
         SELECT 's', md5(i::text), $1, 'done', now() - interval '2 hours' + i * interval '1 millisecond' FROM generate_series(1, 3000) AS i`,
        [fp],
      );
      const other = new PostgresStore({ client: db.client(), table: ctx.table }); // a second host
      const [a, b] = await Promise.all([
        ctx.store.sweepReport({ retentionMs: RETENTION_MS, batchSize: 50 }),
        other.sweepReport({ retentionMs: RETENTION_MS, batchSize: 50 }),
      ]);
      assert.equal(a.deleted + b.deleted, 3000, `sweepers deleted ${a.deleted} + ${b.deleted}`);
      assert.equal(Number((await q().query(`SELECT count(*)::int AS n FROM "${ctx.table}"`)).rows[0]!.n), 0);
    });

    it('does not wait on a row a live transaction holds: skips it and sweeps the rest', async () => {
      const ctx = await freshStore(db.client());
      db.cleanup(ctx.drop);
      await q().query(
        `INSERT INTO "${ctx.table}" (scope, key, fingerprint, state, created_at)
         SELECT 's', 'k' || i, $1, 'done', now() - interval '2 hours' FROM generate_series(1, 20) AS i`,
        [fp],
      );
      const holder = new pg.Client({ connectionString: process.env.DATABASE_URL });
      await holder.connect();
      try {
        await holder.query('BEGIN');
        await holder.query(`SELECT 1 FROM "${ctx.table}" WHERE key = 'k7' FOR UPDATE`);
        const started = Date.now();
        const report = await ctx.store.sweepReport({ retentionMs: RETENTION_MS, batchSize: 5 });
        assert.equal(report.deleted, 19, 'every unlocked expired row');
        assert.ok(Date.now() - started < 15_000, 'the sweep did not wait for the lock holder');
        await holder.query('COMMIT');
      } finally {
        await holder.end();
      }
      assert.equal(await ctx.store.sweep({ retentionMs: RETENTION_MS }), 1, 'the next run takes the row once it is free');
    });
  });
}
