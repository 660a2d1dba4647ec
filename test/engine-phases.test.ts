/**
 * Atomic phases over every suite store: phases commit with their effects, a takeover skips completed
 * phases and returns their recorded results, a throwing phase rolls back; phase names.
 * The frame (stores, fresh store per test, clock) is test/helpers/engine-suite.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { engineSuite, SHORT_LEASE_MS, response, executionOf } from './helpers/engine-suite.js';
import { InvalidPhaseError } from '../src/core/errors.js';

engineSuite((s) => {
  const { makeEngine, begin, takeOver, sideNotes, insertSide, record } = s;
  describe('phases and takeover', () => {
    it('commits phases, and after a takeover skips completed phases and returns their recorded results', async () => {
      const engine = makeEngine({ leaseMs: SHORT_LEASE_MS, heartbeatMs: 0 });
      const calls = { order: 0, charge: 0 };
      const orderPhase = async (tx: unknown) => {
        calls.order++;
        await insertSide('order')(tx);
        return { orderId: 42, createdAt: new Date(Date.UTC(2024, 0, 2, 3, 4, 5)) };
      };

      const first = executionOf(await begin(engine));
      const firstResult = await first.phase('order_created', orderPhase);
      assert.deepEqual(firstResult, { orderId: 42, createdAt: '2024-01-02T03:04:05.000Z' }, 'a Date becomes a string on the first run too');
      assert.equal(first.workStarted, true);
      assert.equal(first.completed('order_created'), true);
      const stored = await record();
      assert.equal(stored?.recoveryPoint, 'order_created');
      assert.deepEqual(stored?.phaseResults, { order_created: firstResult });
      // The worker "crashes" here: no finish, no release.

      const second = await takeOver(engine);
      assert.ok(second.token > first.token, `takeover token ${second.token} must exceed ${first.token}`);
      assert.equal(second.resumed, true);
      assert.equal(second.resumedFrom, 'order_created');
      assert.equal(second.workStarted, true);
      assert.deepEqual(second.result('order_created'), firstResult);
      const resumedResult = await second.phase('order_created', orderPhase);
      assert.deepEqual(resumedResult, firstResult);
      assert.equal(calls.order, 1, 'the completed phase did not run again');
      assert.deepEqual(await sideNotes(), ['order'], 'its effects exist once');

      const charge = await second.phase('charge_recorded', async () => {
        calls.charge++;
        return 'ch_1';
      });
      assert.equal(charge, 'ch_1');
      assert.equal(calls.charge, 1);
      await second.finish(response(201));
      assert.equal((await begin(engine)).kind, 'replay');
    });

    it('rolls back a phase whose function throws, keeps the recovery point and rethrows', async () => {
      const engine = makeEngine();
      const x = executionOf(await begin(engine));
      await x.phase('a', insertSide('a'));
      const boom = new Error('boom');
      await assert.rejects(
        x.phase('b', async (tx) => {
          await insertSide('b')(tx);
          throw boom;
        }),
        (e) => e === boom,
      );
      assert.deepEqual(await sideNotes(), ['a']);
      assert.equal((await record())?.recoveryPoint, 'a');
      assert.equal(x.completed('b'), false);
      assert.equal(x.status, 'open', 'the execution may go on');
      assert.equal(await x.phase('b', async () => 2), 2);
    });

    it('records a phase that returns undefined as null', async () => {
      const x = executionOf(await begin(makeEngine()));
      assert.equal(await x.phase('nothing', async () => undefined), null);
      assert.deepEqual((await record())?.phaseResults, { nothing: null });
    });
  });

  describe('phase names', () => {
    it('throws InvalidPhaseError for invalid or reserved names without running the function', async () => {
      const x = executionOf(await begin(makeEngine()));
      let ran = false;
      const fn = async () => {
        ran = true;
        return 1;
      };
      for (const name of ['', 'has space', 'a/b', 'é', 'x'.repeat(65), 'start', 'finished']) {
        await assert.rejects(x.phase(name, fn), InvalidPhaseError, `phase(${JSON.stringify(name)})`);
        await assert.rejects(x.call(name, fn), InvalidPhaseError, `call(${JSON.stringify(name)})`);
        assert.throws(() => x.derivedKey(name), InvalidPhaseError);
      }
      assert.equal(ran, false);
      assert.equal((await record())?.recoveryPoint, 'start');
      assert.equal(await x.phase('x'.repeat(64), fn), 1, '64 characters is allowed');
      assert.equal(await x.phase('a.B-9_z', fn), 1);
    });
  });
});
