/**
 * Ending an execution over every suite store: release and discard, and finish (the stored
 * response, replays, a closed execution).
 * The frame (stores, fresh store per test, clock) is test/helpers/engine-suite.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { engineSuite, OTHER_FP, SHORT_LEASE_MS, response, executionOf } from './helpers/engine-suite.js';
import type { BeginResult } from '../src/engine/engine.js';
import { ExecutionClosedError, LeaseLostError } from '../src/core/errors.js';

engineSuite((s) => {
  const { makeEngine, begin, takeOver, sideNotes, insertSide, record } = s;
  describe('release and discard', () => {
    it('release lets the next begin take over at once and resume', async () => {
      const engine = makeEngine(); // 60 s lease: only the release can explain a takeover
      const x = executionOf(await begin(engine));
      await x.phase('a', insertSide('a'));
      await x.release();
      assert.equal(x.status, 'released');
      await assert.rejects(
        x.phase('b', async () => 1),
        ExecutionClosedError,
      );

      const y = executionOf(await begin(engine));
      assert.ok(y.token > x.token, `takeover token ${y.token} must exceed ${x.token}`);
      assert.equal(y.resumed, true);
      assert.equal(y.resumedFrom, 'a');
      assert.equal(y.result('a'), 'a');
      let ran = false;
      const again = async () => {
        ran = true;
        return 'again';
      };
      assert.equal(await y.phase('a', again), 'a');
      assert.equal(ran, false);
    });

    it('release with nothing committed lets the next begin start over', async () => {
      const engine = makeEngine();
      const x = executionOf(await begin(engine));
      await x.release();
      const y = executionOf(await begin(engine));
      assert.ok(y.token > x.token, `takeover token ${y.token} must exceed ${x.token}`);
      assert.equal(y.resumed, false);
      assert.equal(y.resumedFrom, 'start');
    });

    it('discard before any phase deletes the key: the next begin is a fresh claim, even with another body', async () => {
      const engine = makeEngine();
      const x = executionOf(await begin(engine));
      assert.equal(await x.discard(), 'deleted');
      assert.equal(await record(), undefined);
      const y = executionOf(await begin(engine, 'k', OTHER_FP));
      assert.equal(y.resumed, false);
      assert.equal(y.resumedFrom, 'start');
      // The row was deleted; the fresh claim still gets a token above the discarded one.
      assert.ok(y.token > x.token, `fresh claim token ${y.token} must exceed the discarded ${x.token}`);
      assert.equal(await x.discard(), 'fenced', 'a closed execution discards nothing');
      assert.ok(await record(), 'the fresh claim is still there');
    });

    it('a stale worker cannot write into a claim made after a discard', async () => {
      const engine = makeEngine({ leaseMs: SHORT_LEASE_MS, heartbeatMs: 0 });
      const stale = executionOf(await begin(engine)); // claims, then "hangs"
      const taker = await takeOver(engine); // its lease ran out: another worker takes over
      assert.ok(taker.token > stale.token, `takeover token ${taker.token} must exceed ${stale.token}`);
      assert.equal(await taker.discard(), 'deleted'); // validation failed before any phase
      assert.equal(await record(), undefined);
      const fresh = executionOf(await begin(engine, 'k', OTHER_FP)); // the client's fixed request
      assert.equal(fresh.resumed, false);
      assert.ok(fresh.token > taker.token, `the new claim's token ${fresh.token} must exceed every earlier one (${stale.token}, ${taker.token})`);
      /** The row without what the clock changes: its lease and retention left, whether the lease ran out. */
      const snapshot = async () => {
        const r = await record();
        return r && { ...r, leaseRemainingMs: undefined, retentionRemainingMs: undefined, leaseExpired: undefined };
      };
      const before = await snapshot();

      // The stale worker wakes up: every write is fenced, its effects roll back.
      await assert.rejects(stale.phase('late', insertSide('stale')), LeaseLostError);
      await assert.rejects(stale.finish(response(500)), LeaseLostError);
      assert.equal(stale.status, 'lost');
      assert.deepEqual(await sideNotes(), []);
      assert.deepEqual(await snapshot(), before, 'the new claim is untouched');

      assert.equal(await fresh.phase('work', insertSide('fresh')), 'fresh');
      await fresh.finish(response(201));
      const done = await record();
      assert.equal(done?.response?.status, 201);
      assert.deepEqual(Array.from(done?.fingerprint ?? []), Array.from(OTHER_FP));
      assert.deepEqual(await sideNotes(), ['fresh']);
    });

    it('discard after a committed phase only releases: the key keeps its fingerprint and resumes', async () => {
      const engine = makeEngine();
      const x = executionOf(await begin(engine));
      await x.phase('a', insertSide('a'));
      assert.equal(await x.discard(), 'released');
      assert.equal((await begin(engine, 'k', OTHER_FP)).kind, 'mismatch');
      const y = executionOf(await begin(engine));
      assert.equal(y.resumed, true);
      assert.equal(y.resumedFrom, 'a');
    });
  });

  describe('finish', () => {
    it('runs its effects and stores the response in one transaction', async () => {
      const engine = makeEngine();
      const x = executionOf(await begin(engine));
      const stored = await x.finish(async (tx) => {
        await insertSide('paid')(tx);
        return response(201, [1, 2]);
      });
      assert.equal(stored.status, 201);
      assert.equal(x.status, 'done');
      assert.deepEqual(await sideNotes(), ['paid']);
      const replay = await begin(engine);
      assert.equal(replay.kind, 'replay');
      assert.deepEqual(Array.from((replay as Extract<BeginResult, { kind: 'replay' }>).response.body), [1, 2]);
    });

    it('leaves no effects when the finish function throws, and the key stays unfinished', async () => {
      const engine = makeEngine();
      const x = executionOf(await begin(engine));
      await assert.rejects(
        x.finish(async (tx) => {
          await insertSide('paid')(tx);
          throw new Error('card declined after insert');
        }),
        /card declined/,
      );
      assert.deepEqual(await sideNotes(), []);
      assert.equal((await record())?.state, 'started');
      assert.equal(x.status, 'open');
    });

    it('leaves no effects when the response it returns is invalid', async () => {
      const x = executionOf(await begin(makeEngine()));
      await assert.rejects(
        x.finish(async (tx) => {
          await insertSide('paid')(tx);
          return { status: 999, headers: [], body: new Uint8Array() };
        }),
        TypeError,
      );
      await assert.rejects(x.finish({ status: 200, headers: [], body: 'text' as unknown as Uint8Array }), TypeError);
      assert.deepEqual(await sideNotes(), []);
      assert.equal((await record())?.state, 'started');
    });

    it('closes the execution: later calls throw ExecutionClosedError', async () => {
      const x = executionOf(await begin(makeEngine()));
      await x.finish(response(200));
      await assert.rejects(x.finish(response(200)), ExecutionClosedError);
      await assert.rejects(
        x.phase('a', async () => 1),
        ExecutionClosedError,
      );
      await assert.rejects(x.extendLease(), ExecutionClosedError);
      await x.release(); // no-op
      assert.equal(x.status, 'done');
      assert.equal((await record())?.state, 'done');
    });
  });
});
