/**
 * External calls over every suite store: `call` passes a derived key and records its result, an
 * unrecorded call repeats with the same derived key; derived keys across takeover, retention
 * and discard.
 * The frame (stores, fresh store per test, clock) is test/helpers/engine-suite.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { engineSuite, type X, SCOPE, SHORT_LEASE_MS, response, executionOf } from './helpers/engine-suite.js';
import { deriveKey } from '../src/core/derived-key.js';
import { LeaseLostError } from '../src/core/errors.js';

engineSuite((s) => {
  const { makeEngine, begin, takeOver, eventually, record } = s;
  describe('call', () => {
    it('passes the derived key, records the result and is not repeated after a takeover', async () => {
      const engine = makeEngine({ leaseMs: SHORT_LEASE_MS, heartbeatMs: 0 });
      const seen: string[] = [];
      const charge = async (derivedKey: string, signal: AbortSignal) => {
        assert.ok(signal instanceof AbortSignal, 'signal instanceof AbortSignal');
        seen.push(derivedKey);
        return { id: 'ch_1', at: new Date(0) };
      };
      const first = executionOf(await begin(engine));
      const result = await first.call('psp_charge', charge);
      assert.deepEqual(result, { id: 'ch_1', at: '1970-01-01T00:00:00.000Z' });
      assert.deepEqual(seen, [deriveKey(SCOPE, 'k', first.claimId, 'psp_charge')]);
      assert.equal(first.claimId, (await record())?.claimId, 'the execution carries the row claim id');
      assert.equal(seen[0], first.derivedKey('psp_charge'));
      const stored = await record();
      assert.equal(stored?.recoveryPoint, 'psp_charge');
      assert.deepEqual(stored?.phaseResults, { psp_charge: result });

      const second = await takeOver(engine);
      assert.deepEqual(await second.call('psp_charge', charge), result);
      assert.equal(seen.length, 1, 'the external call was not repeated');
    });

    it('repeats an unrecorded call after a takeover with the same derived key', async () => {
      const engine = makeEngine({ leaseMs: SHORT_LEASE_MS, heartbeatMs: 0 });
      const seen: string[] = [];
      const first = executionOf(await begin(engine));
      let second: X | undefined;
      // The first worker's call outlives its lease; another worker takes over meanwhile.
      await assert.rejects(
        first.call('psp_charge', async (derivedKey) => {
          seen.push(derivedKey);
          second = await takeOver(engine);
          return 'ch_first';
        }),
        LeaseLostError,
      );
      assert.ok(second, 'another worker took over');
      assert.deepEqual((await record())?.phaseResults, {}, 'the stale result was not recorded');
      assert.equal(await second.call('psp_charge', async (derivedKey) => (seen.push(derivedKey), 'ch_second')), 'ch_second');
      assert.equal(seen.length, 2);
      assert.equal(seen[0], seen[1], 'both attempts carried the same derived key');
    });
  });

  describe('derived keys across claims', () => {
    it('keeps the claim id and derived key across a takeover', async () => {
      const engine = makeEngine({ leaseMs: SHORT_LEASE_MS, heartbeatMs: 0 });
      const first = executionOf(await begin(engine));
      const second = await takeOver(engine);
      assert.ok(second.token > first.token, `takeover token ${second.token} must exceed ${first.token}`);
      assert.equal(second.claimId, first.claimId, 'a takeover continues the same claim');
      assert.equal(second.derivedKey('psp_charge'), first.derivedKey('psp_charge'));
      assert.equal(second.derivedKey('psp_charge'), deriveKey(SCOPE, 'k', first.claimId, 'psp_charge'));
    });

    it('gives a new claim id and derived key when the key is claimed again past retention', async () => {
      // Without a heartbeat, retention only has to exceed the lease.
      const retentionMs = SHORT_LEASE_MS + 100;
      const engine = makeEngine({ leaseMs: SHORT_LEASE_MS, heartbeatMs: 0, retentionMs });
      const first = executionOf(await begin(engine));
      const before = first.derivedKey('psp_charge');
      const finishing = performance.now(); // retention starts after this, when the finish commits
      await first.finish(response(201, [1]));
      const next = await begin(engine);
      if (next.kind !== 'replay') {
        // A loaded machine may take longer than the retention to ask again: then it must really have passed.
        const elapsedMs = performance.now() - finishing;
        assert.ok(elapsedMs >= retentionMs, `a ${next.kind} ${Math.round(elapsedMs)} ms after the finish, within retention (${retentionMs} ms)`);
      }
      const again = executionOf(
        next.kind !== 'replay'
          ? next
          : await eventually(
              () => begin(engine),
              (r) => r.kind !== 'replay',
            ),
      );
      assert.ok(again.token > first.token, `new claim token ${again.token} must exceed ${first.token}`);
      assert.notEqual(again.claimId, first.claimId, 'a claim past retention is a new claim');
      assert.equal((await record())?.claimId, again.claimId, 'the row carries the new claim id');
      assert.notEqual(again.derivedKey('psp_charge'), before, 'a reused key never gets the old downstream key');
      assert.equal(again.derivedKey('psp_charge'), deriveKey(SCOPE, 'k', again.claimId, 'psp_charge'));
    });

    it('gives a new claim id and derived key when the key is claimed again after a discard', async () => {
      const engine = makeEngine();
      const first = executionOf(await begin(engine));
      await first.discard();
      const again = executionOf(await begin(engine));
      assert.notEqual(again.claimId, first.claimId, 'a claim after a discard is a new claim');
      assert.notEqual(again.derivedKey('psp_charge'), first.derivedKey('psp_charge'));
    });
  });
});
