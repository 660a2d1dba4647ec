/**
 * The store contract, part four: crashed attempts are counted by the takeover (protocol.md
 * K23). A lease that ran out unreleased counts one failed attempt in the takeover's own atomic
 * step; a released key is not counted again; a lost takeover counts nothing; a new claim starts
 * at 0.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { TakeOverResult } from '../../../src/store/types.js';
import { claimedToken, claimInput, type ContractContext, fp, phase } from './shared.js';

type Taken = Extract<TakeOverResult, { kind: 'taken' }>;

function taken(result: TakeOverResult): Taken {
  assert.equal(result.kind, 'taken', `expected a takeover, got ${JSON.stringify(result)}`);
  return result as Taken;
}

export function attemptsSuite(ctx: ContractContext): void {
  const { store, ref } = ctx;

  describe('failed attempts (takeover of a crashed attempt, K23)', () => {
    it('counts every takeover of a lease that ran out unreleased, one per crashed attempt', async () => {
      const token = claimedToken(await store().claim(claimInput('crash', { leaseMs: 0 })));
      const first = taken(await store().takeOver(ref('crash', token), 0));
      assert.equal(first.failedAttempts, 1);
      const second = taken(await store().takeOver(ref('crash', first.token), 0));
      assert.equal(second.failedAttempts, 2);
      const third = taken(await store().takeOver(ref('crash', second.token), 60_000));
      assert.equal(third.failedAttempts, 3);
    });

    it('does not count a takeover that follows a release; the next crash counts again', async () => {
      const token = claimedToken(await store().claim(claimInput('released')));
      await store().commit(ref('released', token), phase('p1'), async () => ({ ok: true }));
      assert.equal((await store().release(ref('released', token))).kind, 'ok');
      const afterRelease = taken(await store().takeOver(ref('released', token), 0));
      assert.equal(afterRelease.failedAttempts, 0, 'a released attempt is not a crash');
      // That holder's lease (0 ms) runs out unreleased: a crash, counted by the next takeover.
      const afterCrash = taken(await store().takeOver(ref('released', afterRelease.token), 60_000));
      assert.equal(afterCrash.failedAttempts, 1);
    });

    it('keeps thrown errors counted by countFailure and adds crashes to them', async () => {
      const token = claimedToken(await store().claim(claimInput('mixed')));
      assert.deepEqual(await store().countFailure(ref('mixed', token)), { kind: 'ok', value: 1 });
      await store().release(ref('mixed', token));
      const next = taken(await store().takeOver(ref('mixed', token), 0));
      assert.equal(next.failedAttempts, 1);
      const crashed = taken(await store().takeOver(ref('mixed', next.token), 60_000));
      assert.equal(crashed.failedAttempts, 2);
    });

    it('counts two racing takeovers of one crashed attempt once', async () => {
      const token = claimedToken(await store().claim(claimInput('race', { leaseMs: 0 })));
      const results = await Promise.all([store().takeOver(ref('race', token), 60_000), store().takeOver(ref('race', token), 60_000)]);
      const won = results.filter((r) => r.kind === 'taken') as Taken[];
      assert.equal(won.length, 1, 'exactly one takeover matches the token');
      assert.equal(won[0]!.failedAttempts, 1);
    });

    it('starts a new claim of the key at 0 (a discard, or retention)', async () => {
      const token = claimedToken(await store().claim(claimInput('fresh', { leaseMs: 0 })));
      const held = taken(await store().takeOver(ref('fresh', token), 60_000));
      assert.equal(held.failedAttempts, 1);
      assert.deepEqual(await store().discard(ref('fresh', held.token)), { kind: 'ok', value: 'deleted' });
      const again = claimedToken(await store().claim(claimInput('fresh', { leaseMs: 0, fingerprint: fp(2) })));
      assert.equal(taken(await store().takeOver(ref('fresh', again), 60_000)).failedAttempts, 1);
    });
  });
}
