/**
 * Store contract, part: fencing (no write with an old token changes anything; tokens only grow per key), sweep (where the store has a row sweep) and concurrent claims and commits.
 * Registered by `storeContract` (test/contracts/store.ts) for every store.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ClaimResult } from '../../../src/store/types.js';
import { InvalidOptionError } from '../../../src/core/errors.js';
import {
  SCOPE,
  LONG_LEASE_MS,
  RETENTION_MS,
  fp,
  claimInput,
  claimedToken,
  existing,
  phase,
  finishWith,
  empty,
  expectEffects,
  type ContractContext,
} from './shared.js';

/** Registers this part of the store contract. */
export function fencingSuite(c: ContractContext): void {
  const ctx = c; // `c` is also a KeyRef name in a test below
  const { h, store, caps, ref, age, renewLease, snapshot, get, claimAndTakeOver } = c;
  describe('fencing', () => {
    it('lets no write with the old token change the row after a takeover', async () => {
      const token = claimedToken(await store().claim(claimInput('k', { leaseMs: 0 })));
      const old = ref('k', token);
      await store().commit(old, phase('p1', 0), async () => 'done-by-old');
      const taken = await store().takeOver(old, LONG_LEASE_MS);
      assert.equal(taken.kind, 'taken');
      const current = { ...old, token: (taken as { token: number }).token };
      await store().commit(current, phase('p2'), h().effect('by-new'));
      const before = await snapshot('k');

      assert.deepEqual(await store().commit(old, phase('p3'), h().effect('by-old')), { kind: 'fenced' });
      assert.deepEqual(await store().commit(old, phase('p3')), { kind: 'fenced' });
      assert.deepEqual(await store().commit(old, finishWith({ status: 200, headers: [], body: new Uint8Array([9]) }), h().effect('by-old')), {
        kind: 'fenced',
      });
      assert.deepEqual(await store().commit(old, finishWith({ status: 200, headers: [], body: new Uint8Array([9]) })), { kind: 'fenced' });
      assert.deepEqual(await store().extendLease(old, LONG_LEASE_MS), { kind: 'fenced' });
      assert.deepEqual(await store().release(old), { kind: 'fenced' });
      assert.deepEqual(await store().discard(old), { kind: 'fenced' });
      assert.deepEqual(await store().takeOver(old, LONG_LEASE_MS), { kind: 'lost' });
      if (store().saveRequest)
        assert.deepEqual(await store().saveRequest!(old, { method: 'POST', url: '/', contentType: null, body: null }), { kind: 'fenced' });

      assert.deepEqual(await snapshot('k'), before);
      await expectEffects(ctx, ['by-new'], ['by-new', 'by-old', 'by-old']);
    });

    it('hands out strictly increasing tokens for one key across claim, takeover, discard, claim, retention, sweep and claim', async () => {
      const tokens: number[] = [];
      const t0 = claimedToken(await store().claim(claimInput('k', { leaseMs: 0 })));
      tokens.push(t0);
      const taken = await store().takeOver(ref('k', t0), LONG_LEASE_MS);
      assert.equal(taken.kind, 'taken');
      const t1 = (taken as { token: number }).token;
      tokens.push(t1);
      assert.deepEqual(await store().discard(ref('k', t1)), { kind: 'ok', value: 'deleted' });
      assert.equal(await h().count(), 0);
      // Other keys drawing tokens in between must not matter.
      await store().claim(claimInput('other'));
      const t2 = claimedToken(await store().claim(claimInput('k', { fingerprint: fp(2) })));
      tokens.push(t2);
      await store().commit(ref('k', t2), finishWith(empty()));
      await age('k');
      const t3 = claimedToken(await store().claim(claimInput('k', { fingerprint: fp(3) }))); // replaces the row past retention
      tokens.push(t3);
      if (h().sweepKey) {
        assert.equal(await h().sweepKey!(SCOPE, 'k'), 1, 'the swept row');
        tokens.push(claimedToken(await store().claim(claimInput('k', { fingerprint: fp(4) }))));
      }
      for (let i = 1; i < tokens.length; i++) {
        assert.ok(tokens[i]! > Math.max(...tokens.slice(0, i)), `token ${i} (${tokens[i]}) must exceed every earlier one: ${tokens.join(', ')}`);
      }
      // Every earlier token is fenced on the latest claim.
      const before = await snapshot('k');
      for (const token of tokens.slice(0, -1)) {
        const stale = ref('k', token);
        assert.deepEqual(await store().commit(stale, phase('late'), h().effect(`stale-${token}`)), { kind: 'fenced' }, `token ${token}`);
        assert.deepEqual(await store().commit(stale, finishWith(empty(500))), { kind: 'fenced' });
        assert.deepEqual(await store().extendLease(stale, LONG_LEASE_MS), { kind: 'fenced' });
        assert.deepEqual(await store().discard(stale), { kind: 'fenced' });
      }
      assert.deepEqual(await snapshot('k'), before);
      await expectEffects(
        ctx,
        [],
        tokens.slice(0, -1).map((token) => `stale-${token}`),
      );
    });

    it('fences a stale worker out of a claim made after a discard', async () => {
      // Worker A claims and hangs; its lease runs out and B takes over, then B discards (the
      // request failed validation); the client's fixed request claims the key again.
      const { ref: b, stale: a } = await claimAndTakeOver('k');
      assert.deepEqual(await store().discard(b), { kind: 'ok', value: 'deleted' });
      const c = ref('k', claimedToken(await store().claim(claimInput('k', { fingerprint: fp(7) }))));
      assert.ok(c.token > b.token && c.token > a.token, `the new claim's token ${c.token} exceeds ${a.token} and ${b.token}`);
      const before = await snapshot('k');
      for (const stale of [a, b]) {
        assert.deepEqual(await store().commit(stale, phase('late'), h().effect('stale')), { kind: 'fenced' });
        assert.deepEqual(await store().release(stale), { kind: 'fenced' });
      }
      assert.deepEqual(await snapshot('k'), before);
      await expectEffects(ctx, [], ['stale', 'stale']);
      assert.deepEqual(await store().commit(c, phase('p1'), h().effect('fresh')), { kind: 'ok', value: { note: 'fresh' } });
      await expectEffects(ctx, ['fresh'], ['stale', 'stale', 'fresh']);
    });
  });

  describe('sweep', { skip: caps.sweep !== 'rows' && `sweep: ${caps.sweep || 'none'}` }, () => {
    const sweep = (options?: { retentionMs?: number; batchSize?: number }) => h().sweep!(options);

    it('deletes only rows past retention, in batches, and leaves live rows', async () => {
      for (let i = 0; i < 10; i++) {
        const token = claimedToken(await store().claim(claimInput(`old-${i}`)));
        if (i % 2 === 0) await store().commit(ref(`old-${i}`, token), finishWith(empty()));
        await age(`old-${i}`);
      }
      for (let i = 0; i < 4; i++) await store().claim(claimInput(`live-${i}`));
      assert.equal(await sweep({ retentionMs: RETENTION_MS, batchSize: 3 }), 10);
      for (let i = 0; i < 4; i++) assert.ok(await get(`live-${i}`), `live-${i} stays`);
      assert.equal(await sweep({ retentionMs: RETENTION_MS, batchSize: 3 }), 0, 'nothing left to sweep');
      assert.equal(await h().count(), 4);
    });

    it('leaves a row past retention alone while its lease is valid, and deletes it once the lease expired', async () => {
      const token = claimedToken(await store().claim(claimInput('live')));
      await store().commit(ref('live', token), phase('p1'), h().effect('live'));
      await age('live');
      await renewLease('live'); // its worker is still running past retention
      assert.equal(await sweep({ retentionMs: RETENTION_MS }), 0);
      assert.equal(await h().count(), 1);
      assert.equal(await h().tokenOf(SCOPE, 'live'), token);

      await h().setLease(SCOPE, 'live', -1000);
      assert.equal(await sweep({ retentionMs: RETENTION_MS }), 1, 'the lease ran out: now it is swept');
      assert.equal(await h().count(), 0);
    });

    it('keeps fresh rows with the default 24 h retention', async () => {
      await store().claim(claimInput('k'));
      assert.equal(await sweep(), 0);
      assert.equal(await h().count(), 1);
    });

    it('rejects a batch size below 1', async () => {
      await assert.rejects(sweep({ batchSize: 0 }), InvalidOptionError);
    });
  });

  describe('concurrency', () => {
    it('gives exactly one of 50 concurrent claims on one key the claim, and "exists" to all others', async () => {
      for (let round = 0; round < 3; round++) {
        const key = `race-${round}`;
        const settled = await Promise.allSettled(Array.from({ length: 50 }, () => store().claim(claimInput(key))));
        assert.deepEqual(
          settled.filter((s) => s.status === 'rejected'),
          [],
          'no claim may throw',
        );
        const results = settled.map((s) => (s as PromiseFulfilledResult<ClaimResult>).value);
        const claimed = results.filter((r) => r.kind === 'claimed');
        assert.equal(claimed.length, 1, `round ${round}: exactly one claim`);
        const token = claimedToken(claimed[0]!);
        const others = results.filter((r) => r.kind === 'exists');
        assert.equal(others.length, 49);
        for (const r of others) {
          const record = existing(r);
          assert.equal(record.token, token);
          assert.equal(record.state, 'started');
          assert.equal(record.leaseExpired, false);
        }
      }
      assert.equal(await h().count(), 3);
    });

    it('commits 30 phases at once, each with its effects in its own transaction', async () => {
      const refs = await Promise.all(Array.from({ length: 30 }, async (_, i) => ref(`k${i}`, claimedToken(await store().claim(claimInput(`k${i}`))))));
      const results = await Promise.all(refs.map((r) => store().commit(r, phase('p'), h().effect(r.key))));
      assert.ok(
        results.every((r) => r.kind === 'ok'),
        'every phase committed',
      );
      assert.equal((await h().effects()).length, 30);
    });
  });
}
