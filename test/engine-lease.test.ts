/**
 * The lease over every suite store: a stale execution gets LeaseLostError once another worker
 * took over (effects rolled back, signal aborted), and the heartbeat that keeps a lease.
 * The frame (stores, fresh store per test, clock) is test/helpers/engine-suite.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { engineSuite, type X, SCOPE, SHORT_LEASE_MS, response, executionOf } from './helpers/engine-suite.js';
import type { BeginResult } from '../src/engine/engine.js';
import { ErrorCode, InvalidOptionError, LeaseLostError } from '../src/core/errors.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { MemoryStore } from '../src/memory/index.js';

engineSuite((s) => {
  const { makeEngine, begin, takeOver, eventually, sleep, sideNotes, insertSide, record } = s;
  describe('a stale execution', () => {
    it('gets LeaseLostError from phase, call, finish and extendLease once another worker took over', async () => {
      const engine = makeEngine({ leaseMs: SHORT_LEASE_MS, heartbeatMs: 0 });
      const keys = ['phase', 'call', 'finish', 'extend'];
      const stale = await Promise.all(keys.map(async (key) => executionOf(await begin(engine, key))));
      const fresh = await Promise.all(keys.map((key) => takeOver(engine, key)));
      for (const [i, x] of fresh.entries()) assert.ok(x.token > stale[i]!.token, `${keys[i]}: takeover token ${x.token} must exceed ${stale[i]!.token}`);
      const [xPhase, xCall, xFinish, xExtend] = stale as [X, X, X, X];

      // phase: effects rolled back, signal aborted.
      let phaseRan = false;
      await assert.rejects(
        xPhase.phase('p', async (tx) => {
          phaseRan = true;
          return insertSide('stale-phase')(tx);
        }),
        (e: unknown) => e instanceof LeaseLostError && e.code === ErrorCode.LeaseLost,
      );
      assert.equal(phaseRan, true);
      assert.equal(xPhase.signal.aborted, true);
      assert.ok(xPhase.signal.reason instanceof LeaseLostError, 'xPhase.signal.reason instanceof LeaseLostError');
      assert.equal(xPhase.status, 'lost');

      // call: the call ran, its result is not recorded.
      await assert.rejects(
        xCall.call('psp', async () => 'ch'),
        LeaseLostError,
      );
      assert.equal(xCall.signal.aborted, true);

      // finish with effects: nothing stored, effects rolled back.
      await assert.rejects(
        xFinish.finish(async (tx) => {
          await insertSide('stale-finish')(tx);
          return response(200);
        }),
        LeaseLostError,
      );
      assert.equal(xFinish.signal.aborted, true);

      await assert.rejects(xExtend.extendLease(), LeaseLostError);
      assert.equal(xExtend.signal.aborted, true);

      assert.deepEqual(await sideNotes(), [], 'no stale effect survived');
      for (const [i, key] of keys.entries()) {
        const r = await record(key);
        assert.equal(r?.state, 'started');
        assert.equal(r?.token, fresh[i]!.token, 'the row holds the new owner token');
        assert.deepEqual(r?.phaseResults, {});
      }

      // Once lost, every method keeps failing without running its function.
      let ran = false;
      await assert.rejects(
        xPhase.phase('q', async () => (ran = true)),
        LeaseLostError,
      );
      await assert.rejects(
        xPhase.call('q', async () => (ran = true)),
        LeaseLostError,
      );
      await assert.rejects(xPhase.finish(response(200)), LeaseLostError);
      assert.equal(ran, false);

      // The new owners are unaffected.
      await fresh[2]!.finish(response(201, [7]));
      const replay = await begin(engine, 'finish');
      assert.equal(replay.kind, 'replay');
      assert.equal((replay as Extract<BeginResult, { kind: 'replay' }>).response.status, 201);
    });

    it('learns from its heartbeat that the lease was taken over, and aborts its signal', async () => {
      const engine = makeEngine({ leaseMs: 1000, heartbeatMs: 100 });
      const stale = executionOf(await begin(engine));
      // Force the lease out, as if the heartbeat had stalled, and let another worker take
      // over; repeat if a heartbeat slipped in between and renewed the lease.
      const other = makeEngine({ leaseMs: 1000, heartbeatMs: 0 });
      const taken = await eventually(
        async () => {
          await s.h.setLease(SCOPE, 'k', -1000);
          return begin(other);
        },
        (r) => r.kind === 'execute',
      );
      const newToken = executionOf(taken).token;
      assert.ok(newToken > stale.token, `takeover token ${newToken} must exceed ${stale.token}`);
      await eventually(
        async () => stale.signal.aborted,
        (aborted) => aborted,
        2000,
      );
      assert.ok(stale.signal.reason instanceof LeaseLostError, 'stale.signal.reason instanceof LeaseLostError');
      assert.equal(stale.status, 'lost');
      assert.equal((await record())?.token, newToken);
    });
  });

  describe('heartbeat', () => {
    it('keeps a lease alive past leaseMs', async () => {
      // Periods a loaded two-core machine keeps: ten heartbeats in each lease.
      const engine = makeEngine({ leaseMs: 1000, heartbeatMs: 100 });
      const x = executionOf(await begin(engine));
      await sleep(2000);
      const concurrent = await begin(engine);
      assert.equal(concurrent.kind, 'in-progress');
      assert.equal((await record())?.leaseExpired, false);
      await x.finish(response(200));
    });

    it('stops extending after maxExecutionMs, so another worker can take over', async () => {
      const engine = makeEngine({ leaseMs: 1000, heartbeatMs: 100, maxExecutionMs: 1500 });
      const started = Date.now();
      const x = executionOf(await begin(engine));
      await sleep(1200);
      assert.equal((await begin(engine)).kind, 'in-progress', 'the heartbeat ran past the first lease');
      const y = await takeOver(engine);
      const elapsed = Date.now() - started;
      assert.ok(y.token > x.token, `takeover token ${y.token} must exceed ${x.token}`);
      assert.ok(elapsed >= 1500, `taken over after ${elapsed} ms, before maxExecutionMs`);
      await assert.rejects(
        x.phase('late', async () => 1),
        LeaseLostError,
      );
    });

    it('stops when the execution is released', async () => {
      const engine = makeEngine({ leaseMs: 300, heartbeatMs: 50 });
      const x = executionOf(await begin(engine));
      await x.phase('a', async () => 1);
      await x.release();
      await sleep(150);
      const r = await record();
      assert.equal(r?.leaseExpired, true, 'no heartbeat renewed the released lease');
    });
  });
});

describe('a lease per call (protocol.md K26)', () => {
  it('begin({ leaseMs }) holds the key that long from the claim and each phase, however short beside the engine’s lease and wait; one reaching retention is refused, nothing claimed', async () => {
    const store = new MemoryStore();
    const engine = new IdempotencyEngine({ store, leaseMs: 60_000, inProgress: { wait: 30_000 } });
    const print = new Uint8Array(32);
    const begun = await engine.begin({ scope: 'k26', key: 'short', fingerprint: print, leaseMs: 1_500 });
    assert.equal(begun.kind, 'execute');
    const lease = async () => (await store.get('k26', 'short', 86_400_000))!.leaseRemainingMs;
    const claimed = await lease();
    assert.ok(claimed > 0 && claimed <= 1_500, `claim lease ${claimed} ms`);
    await (begun as Extract<BeginResult, { kind: 'execute' }>).execution.phase('p', async () => 1);
    const renewed = await lease();
    assert.ok(renewed > 0 && renewed <= 1_500, `phase lease ${renewed} ms`);
    await assert.rejects(engine.begin({ scope: 'k26', key: 'long', fingerprint: print, leaseMs: 86_400_000 }), InvalidOptionError);
    assert.equal(await store.get('k26', 'long', 86_400_000), undefined);
  });
});
