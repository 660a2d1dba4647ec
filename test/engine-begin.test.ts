/**
 * IdempotencyEngine.begin over every suite store: a new key, in-progress, mismatch before in-progress
 * and replay, exact replay bytes, and invalid input refused before the store is touched.
 * The frame (stores, fresh store per test, clock) is test/helpers/engine-suite.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { engineSuite, SCOPE, FP, OTHER_FP, SHORT_LEASE_MS, response, executionOf } from './helpers/engine-suite.js';
import { citusNotice } from './helpers/citus-stores.js';
import type { BeginResult } from '../src/engine/engine.js';
import { InvalidKeyError, InvalidScopeError } from '../src/core/errors.js';

citusNotice();
engineSuite((s) => {
  const { makeEngine, begin, eventually, record } = s;
  describe('begin', () => {
    it('executes a new key with a fresh positive token, not resumed', async () => {
      const x = executionOf(await begin(makeEngine()));
      assert.ok(Number.isSafeInteger(x.token) && x.token > 0, `a positive integer token, got ${x.token}`);
      assert.equal((await record())?.token, x.token, 'the execution holds the row token');
      assert.equal(x.resumed, false);
      assert.equal(x.resumedFrom, 'start');
      assert.equal(x.status, 'open');
      assert.equal(x.workStarted, false);
      assert.equal(x.scope, SCOPE);
      assert.equal(x.key, 'k');
    });

    it('answers in-progress to a second begin while the lease is valid, with retryAfterMs within the lease', async () => {
      const engine = makeEngine({ leaseMs: 5000 });
      executionOf(await begin(engine));
      const second = await begin(engine);
      assert.equal(second.kind, 'in-progress');
      const { retryAfterMs } = second as Extract<BeginResult, { kind: 'in-progress' }>;
      assert.ok(retryAfterMs > 0 && retryAfterMs <= 5000, `retryAfterMs ${retryAfterMs}`);
      assert.ok(retryAfterMs > 3000, `retryAfterMs ${retryAfterMs} reflects the remaining lease`);
    });

    it('answers mismatch to a different fingerprint, before in-progress and before replay', async () => {
      const engine = makeEngine();
      const x = executionOf(await begin(engine));
      const whileRunning = await begin(engine, 'k', OTHER_FP);
      assert.equal(whileRunning.kind, 'mismatch');
      assert.deepEqual(Array.from((whileRunning as Extract<BeginResult, { kind: 'mismatch' }>).record.fingerprint), Array.from(FP));

      await x.finish(response(201, [1, 2, 3]));
      assert.equal((await begin(engine, 'k', OTHER_FP)).kind, 'mismatch');
      const replay = await begin(engine);
      assert.equal(replay.kind, 'replay', 'the mismatch left the stored row untouched');
    });

    it('answers mismatch, not take-over, to a different fingerprint after the lease expired', async () => {
      const engine = makeEngine({ leaseMs: SHORT_LEASE_MS, heartbeatMs: 0 });
      const x = executionOf(await begin(engine));
      await eventually(
        () => record(),
        (r) => r?.leaseExpired === true,
      );
      assert.equal((await begin(engine, 'k', OTHER_FP)).kind, 'mismatch');
      assert.equal((await record())?.token, x.token, 'nothing was taken over');
      assert.equal((await record())?.leaseExpired, true, 'nor was the lease renewed');
    });

    it('replays a stored 402 with its exact bytes', async () => {
      const engine = makeEngine();
      const x = executionOf(await begin(engine));
      await x.finish(response(402, [0, 255, 10, 0]));
      const replay = await begin(engine);
      assert.equal(replay.kind, 'replay');
      const stored = (replay as Extract<BeginResult, { kind: 'replay' }>).response;
      assert.equal(stored.status, 402);
      assert.deepEqual(stored.headers, [['content-type', 'application/octet-stream']]);
      assert.deepEqual(Array.from(stored.body), [0, 255, 10, 0]);
    });

    it('rejects an invalid key, scope or fingerprint before touching the store', async () => {
      const engine = makeEngine();
      await assert.rejects(engine.begin({ scope: SCOPE, key: '', fingerprint: FP }), InvalidKeyError);
      await assert.rejects(engine.begin({ scope: SCOPE, key: 'x'.repeat(256), fingerprint: FP }), InvalidKeyError);
      await assert.rejects(engine.begin({ scope: '', key: 'k', fingerprint: FP }), InvalidScopeError);
      await assert.rejects(engine.begin({ scope: 's'.repeat(256), key: 'k', fingerprint: FP }), InvalidScopeError);
      await assert.rejects(engine.begin({ scope: SCOPE, key: 'k', fingerprint: new Uint8Array(31) }), TypeError);
      assert.equal(await s.h.count(), 0);
    });
  });
});
