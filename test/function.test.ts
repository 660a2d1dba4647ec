/**
 * idem/function: `idempotent(fn, options)` over the memory store, PostgresStore on PGlite and
 * (with DATABASE_URL / REDIS_URL) on PostgreSQL and RedisStore + PostgresPhases. Effects are the
 * store harness's business rows, written in the phase's transaction and counted.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { idempotent, type FunctionContext, KeyInProgressError, KeyMismatchError, StoredFailureError, type ResultCodec } from '../src/function/index.js';
import { workStores, useWorkStore } from './helpers/work-stores.js';
import { gatedWork } from './helpers/http.js';

for (const factory of workStores) {
  describe(`idempotent(fn) over ${factory.name}`, () => {
    const fresh = useWorkStore(factory);

    it('runs once per key: the second call returns the first result as a value, the effect committed once', async () => {
      const h = await fresh();
      let runs = 0;
      const invoice = idempotent(
        async (ctx: FunctionContext<unknown, { id: string; total: number; at: string }>, order: { id: string; total: number }) => {
          runs++;
          const row = await ctx.phase('invoice', h.effect(`invoice ${order.id}`));
          return { id: `${row.note}`, total: order.total, at: new Date(1_700_000_000_000 + Math.random()).toISOString() };
        },
        { store: h.store, name: 'invoices', key: (order) => order.id },
      );
      const first = await invoice.outcome({}, { id: 'o-1', total: 42 });
      const second = await invoice.outcome({}, { id: 'o-1', total: 42 });
      assert.equal(runs, 1);
      assert.equal(first.replayed, false);
      assert.equal(second.replayed, true);
      assert.deepEqual(second.value, first.value);
      assert.deepEqual(await h.effects(), ['invoice o-1']);
      // Another key runs.
      await invoice({ id: 'o-2', total: 1 });
      assert.equal(runs, 2);
    });

    it('the result goes through the codec on the first call too: a JSON Date is its string on both calls; a user codec keeps a bigint and a Map', async () => {
      const h = await fresh();
      const dated = idempotent(async () => ({ at: new Date(0) }) as unknown as { at: string }, { store: h.store, name: 'dated', key: 'k' });
      assert.deepEqual(await dated(), { at: '1970-01-01T00:00:00.000Z' });
      assert.deepEqual(await dated(), { at: '1970-01-01T00:00:00.000Z' });
      const codec: ResultCodec<Map<string, bigint>> = {
        contentType: 'application/x-pairs',
        encode: (m) => [...m].map(([k, v]) => `${k}=${v}`).join('&'),
        decode: (bytes) => new Map([...new URLSearchParams(new TextDecoder().decode(bytes))].map(([k, v]) => [k, BigInt(v)])),
      };
      let runs = 0;
      const totals = idempotent(async (_ctx, day: string) => (runs++, new Map([[day, 2n ** 70n]])), { store: h.store, name: 'totals', codec });
      const a = await totals('2026-01-01');
      const b = await totals.outcome({}, '2026-01-01');
      assert.equal(runs, 1);
      assert.equal(b.replayed, true);
      assert.equal(a.get('2026-01-01'), 2n ** 70n);
      assert.equal(b.value.get('2026-01-01'), 2n ** 70n);
    });

    it('the default key is the arguments: reordered object keys are the same call; other arguments are another call', async () => {
      const h = await fresh();
      let runs = 0;
      const add = idempotent(async (_ctx, x: { a: number; b: number }) => (runs++, x.a + x.b), { store: h.store, name: 'add' });
      assert.equal(await add({ a: 1, b: 2 }), 3);
      assert.equal(await add({ b: 2, a: 1 }), 3);
      assert.equal(runs, 1);
      assert.equal(await add({ a: 2, b: 2 }), 4);
      assert.equal(runs, 2);
    });

    it('the same key with other arguments throws KeyMismatchError and the function does not run', async () => {
      const h = await fresh();
      let runs = 0;
      const charge = idempotent(async (_ctx, _id: string, amount: number) => (runs++, amount), { store: h.store, name: 'charge', key: (id) => id });
      await charge('c-1', 100);
      await assert.rejects(charge('c-1', 999), (e: unknown) => e instanceof KeyMismatchError && e.code === 'IDEM_KEY_MISMATCH');
      assert.equal(runs, 1);
      assert.equal(await charge('c-1', 100), 100);
    });

    it('a given key (withKey) wins over the options’ key', async () => {
      const h = await fresh();
      let runs = 0;
      const job = idempotent(async (_ctx, n: number) => (runs++, n), { store: h.store, name: 'job', key: () => 'fixed' });
      assert.equal(await job.withKey('run-1')(1), 1);
      assert.equal(await job.withKey('run-1')(1), 1);
      assert.equal(await job.withKey('run-2')(1), 1);
      assert.equal(runs, 2);
    });

    it('a thrown error is not stored: the lease is released and the next call resumes after the committed phase (its effect once)', async () => {
      const h = await fresh();
      let runs = 0;
      const step = idempotent(
        async (ctx, id: string) => {
          runs++;
          await ctx.phase('reserved', h.effect(`reserve ${id}`));
          if (runs === 1) throw new Error('the carrier is down');
          await ctx.phase('shipped', h.effect(`ship ${id}`));
          return { resumed: ctx.resumed };
        },
        { store: h.store, name: 'ship', key: (id) => id },
      );
      await assert.rejects(step('s-1'), /the carrier is down/);
      assert.deepEqual(await step('s-1'), { resumed: true });
      assert.equal(runs, 2);
      assert.deepEqual(await h.effects(), ['reserve s-1', 'ship s-1']);
    });

    it('a result the codec cannot encode fails closed: its failure is stored, the next call does not run the function again (protocol.md K46)', async () => {
      const h = await fresh();
      let runs = 0;
      const total = idempotent(
        async (ctx) => {
          runs++;
          await ctx.phase('counted', h.effect('count'));
          return (runs === 1 ? { total: 1n } : { total: 1 }) as unknown as { total: number };
        },
        { store: h.store, name: 'total', key: 'day-1' },
      );
      const unencodable = (e: unknown) => e instanceof StoredFailureError && e.failure.code === 'IDEM_UNENCODABLE_RESULT';
      await assert.rejects(total(), unencodable, 'JSON cannot encode a bigint: the stored failure');
      await assert.rejects(total(), unencodable, 'every later call gets the stored failure');
      assert.equal(runs, 1, 'the function ran once: its effects stand, the key was not freed for a rerun');
      assert.deepEqual(await h.effects(), ['count'], 'the committed phase is not repeated');
    });

    it('storeErrors: the failure is stored and every later call throws StoredFailureError without running', async () => {
      const h = await fresh();
      let runs = 0;
      class Declined extends Error {
        code = 'card_declined';
      }
      const pay = idempotent(
        async (_ctx, id: string) => {
          runs++;
          throw Object.assign(new Declined(`card of ${id} declined`), { name: 'Declined' });
        },
        { store: h.store, name: 'pay', key: (id) => id, storeErrors: (e) => e instanceof Declined },
      );
      await assert.rejects(pay('p-1'), Declined);
      await assert.rejects(pay('p-1'), (e: unknown) => {
        assert.ok(e instanceof StoredFailureError);
        assert.deepEqual(e.failure, { name: 'Declined', message: 'card of p-1 declined', code: 'card_declined' });
        return true;
      });
      assert.equal(runs, 1);
      // Not kept by the predicate: not stored.
      const flaky = idempotent(
        async () => {
          runs++;
          throw new TypeError('bug');
        },
        { store: h.store, name: 'flaky', key: 'k', storeErrors: (e) => e instanceof Declined },
      );
      await assert.rejects(flaky(), TypeError);
      await assert.rejects(flaky(), TypeError);
      assert.equal(runs, 3);
    });

    it('a concurrent call with a held key throws KeyInProgressError; the holder finishes and later calls replay', async () => {
      const h = await fresh();
      const { gate, entered, runs, work } = gatedWork(() => 'done');
      const slow = idempotent(work, { store: h.store, name: 'slow', key: 'k' });
      const first = slow();
      await entered.promise;
      await assert.rejects(slow(), (e: unknown) => e instanceof KeyInProgressError && e.retryAfterMs > 0);
      gate.resolve();
      assert.equal(await first, 'done');
      assert.equal(await slow(), 'done');
      assert.equal(runs(), 1);
    });

    it('a caller that died holding the key is taken over once its lease ends: resumed after its phase, the phase not repeated', async () => {
      const h = await fresh();
      const dead = idempotent(
        async (ctx) => {
          await ctx.phase('debited', h.effect('debit'));
          return new Promise<string>(() => undefined); // never returns: a process that died
        },
        { store: h.store, name: 'transfer', key: 't-1', heartbeatMs: 0 },
      );
      void dead();
      const live = idempotent(
        async (ctx) => {
          const debited = await ctx.phase('debited', h.effect('debit again'));
          await ctx.phase('credited', h.effect('credit'));
          return `${debited.note} ${ctx.resumed}`;
        },
        { store: h.store, name: 'transfer', key: 't-1' },
      );
      // Wait for the dead caller's phase, then end its lease as time would.
      for (let i = 0; i < 200 && (await h.effects()).length === 0; i++) await new Promise((r) => setTimeout(r, 10));
      await assert.rejects(live(), KeyInProgressError);
      await h.setLease('transfer', 't-1', -1000);
      assert.equal(await live(), 'debit true');
      assert.deepEqual(await h.effects(), ['debit', 'credit']);
    });

    it('a crash loop ends at maxAttempts: the call after the second dead one stores the failure instead of running', { timeout: 60_000 }, async () => {
      const h = await fresh();
      let runs = 0;
      const dies = idempotent(
        async () => {
          runs++;
          return new Promise<string>(() => undefined); // a process that died inside the function
        },
        { store: h.store, name: 'loop', key: 'k', heartbeatMs: 0, maxAttempts: 2 },
      );
      void dies();
      for (let died = 1; died <= 2; died++) {
        for (let i = 0; i < 200 && runs < died; i++) await new Promise((r) => setTimeout(r, 10));
        await h.setLease('loop', 'k', -1000);
        if (died < 2) void dies();
      }
      const isPermanent = (e: unknown) => e instanceof StoredFailureError && e.failure.code === 'IDEM_FAILED_PERMANENTLY';
      await assert.rejects(dies(), isPermanent);
      await assert.rejects(dies(), isPermanent);
      assert.equal(runs, 2);
    });

    it('ctx.complete finishes the key in the same transaction as the last effect and its value is the result', async () => {
      const h = await fresh();
      const effect = h.effect('booked') as (tx: unknown) => Promise<{ note: string }>;
      const book = idempotent(
        async (ctx: FunctionContext<unknown, { note: string }>) => {
          await ctx.complete((tx) => effect(tx));
          return { note: 'ignored' };
        },
        { store: h.store, name: 'book', key: 'b-1' },
      );
      assert.deepEqual(await book(), { note: 'booked' });
      assert.deepEqual(await book(), { note: 'booked' });
      assert.deepEqual(await h.effects(), ['booked']);
    });
  });
}

describe('idempotent(fn) options', () => {
  it('refuses a missing store, name or a bad waitMs at creation', async () => {
    const { MemoryStore } = await import('../src/memory/index.js');
    const store = new MemoryStore();
    assert.throws(() => idempotent(async () => 1, { store, name: '' }), /name/);
    assert.throws(() => idempotent(async () => 1, { name: 'x' } as never), /store/);
    assert.throws(() => idempotent(async () => 1, { store, name: 'x', waitMs: -1 }), /waitMs/);
  });
});
