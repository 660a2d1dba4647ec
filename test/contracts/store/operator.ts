/**
 * The store contract, part five: an operator's release and forget (protocol.md K40-K42),
 * through `operate`. Each is fenced by the token read and the state it needs, draws a higher
 * token, and leaves its note on the record `get` reads.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { hasOperator } from '../../../src/store/capabilities.js';
import type { Fenced, IdempotencyStore, OperatorWrite } from '../../../src/store/types.js';
import { claimedToken, claimInput, type ContractContext, empty, finishWith, fp, phase } from './shared.js';

export function operatorSuite(ctx: ContractContext): void {
  const { store, ref, get } = ctx;
  const operate = (write: OperatorWrite): Promise<Fenced<{ token: number }>> => (store() as Required<IdempotencyStore>).operate(write);
  const newToken = (result: Fenced<{ token: number }>): number => {
    assert.equal(result.kind, 'ok', `expected the write to match, got ${JSON.stringify(result)}`);
    return (result as { value: { token: number } }).value.token;
  };

  describe('operator release and forget (K40-K42)', () => {
    it('release: ends an ended lease with a higher token, keeps the phases, records the note; the next takeover resumes and counts no crash', async () => {
      assert.ok(hasOperator(store()), 'every idem store declares the operator capability');
      const token = claimedToken(await store().claim(claimInput('rel', { leaseMs: 0 })));
      // The worker committed a phase, then its lease ran out (it hung or died).
      const taken = await store().takeOver(ref('rel', token), 60_000);
      assert.equal(taken.kind, 'taken');
      const held = (taken as { token: number }).token;
      await store().commit(ref('rel', held), phase('charged', 0), async () => 'ch_1');
      const released = newToken(await operate({ action: 'release', ref: ref('rel', held), note: '{"action":"release"}' }));
      assert.ok(released > held);
      const record = await get('rel');
      assert.equal(record?.state, 'started');
      assert.equal(record?.recoveryPoint, 'charged');
      assert.equal(record?.leaseExpired, true);
      assert.equal(record?.operatorNote, '{"action":"release"}');
      assert.equal((await store().extendLease(ref('rel', held), 60_000)).kind, 'fenced', 'the old holder is fenced');
      const next = await store().takeOver(ref('rel', released), 60_000);
      assert.equal(next.kind, 'taken');
      assert.deepEqual((next as { phaseResults: unknown }).phaseResults, { charged: 'ch_1' });
      assert.equal((next as { failedAttempts?: number }).failedAttempts ?? 0, 1, 'only the first takeover of the unreleased lease counted');
    });

    it('release: refuses a valid lease without force; with force the holder is fenced', async () => {
      assert.ok(hasOperator(store()), 'every idem store declares the operator capability');
      const token = claimedToken(await store().claim(claimInput('live')));
      assert.deepEqual(await operate({ action: 'release', ref: ref('live', token), note: '{}' }), { kind: 'fenced' });
      assert.equal((await get('live'))?.leaseExpired, false, 'the live lease is untouched');
      assert.equal((await get('live'))?.operatorNote, undefined);
      assert.equal((await store().extendLease(ref('live', token), 60_000)).kind, 'ok', 'the holder still writes');
      const forced = newToken(await operate({ action: 'release', ref: ref('live', token), force: true, note: '{"force":true}' }));
      assert.equal((await get('live'))?.leaseExpired, true);
      assert.equal((await store().extendLease(ref('live', token), 60_000)).kind, 'fenced', "the holder's heartbeat cannot win the lease back");
      assert.equal((await store().takeOver(ref('live', forced), 60_000)).kind, 'taken');
      assert.equal((await store().commit(ref('live', token), phase('late'))).kind, 'fenced', 'the holder is fenced');
    });

    it('release: refuses a finished key and a stale token', async () => {
      assert.ok(hasOperator(store()), 'every idem store declares the operator capability');
      const token = claimedToken(await store().claim(claimInput('fin')));
      await store().commit(ref('fin', token), finishWith(empty(201)));
      assert.deepEqual(await operate({ action: 'release', ref: ref('fin', token), force: true, note: '{}' }), { kind: 'fenced' });
      const stale = claimedToken(await store().claim(claimInput('stale', { leaseMs: 0 })));
      const taken = await store().takeOver(ref('stale', stale), 0);
      assert.equal(taken.kind, 'taken');
      assert.deepEqual(await operate({ action: 'release', ref: ref('stale', stale), force: true, note: '{}' }), { kind: 'fenced' });
    });

    it('forget: a finished key becomes a released claim at start with nothing stored, new token and claim id, same fingerprint', async (t) => {
      if (ctx.caps.forget === false) return t.skip('no forget');
      const claim = await store().claim(claimInput('forget'));
      const token = claimedToken(claim);
      const claimId = (claim as { claimId: string }).claimId;
      await store().commit(ref('forget', token), phase('p1'), async () => 1);
      await store().commit(
        ref('forget', token),
        finishWith({ status: 500, headers: [['content-type', 'application/problem+json']], body: new Uint8Array([1, 2]) }),
      );
      const forgotten = newToken(await operate({ action: 'forget', ref: ref('forget', token), note: '{"action":"forget"}' }));
      assert.ok(forgotten > token);
      const record = await get('forget');
      assert.equal(record?.state, 'started');
      assert.equal(record?.recoveryPoint, 'start');
      assert.deepEqual(record?.phaseResults, {});
      assert.equal(record?.response, undefined);
      assert.equal(record?.leaseExpired, true);
      assert.notEqual(record?.claimId, claimId, 'a new claim id: new derived keys (K11)');
      assert.deepEqual(record?.fingerprint, fp(1));
      assert.equal(record?.operatorNote, '{"action":"forget"}');
      // The next request with the same body takes it over and runs from the start.
      const again = await store().claim(claimInput('forget'));
      assert.equal(again.kind, 'exists');
      const next = await store().takeOver(ref('forget', forgotten), 60_000);
      assert.equal(next.kind, 'taken');
      assert.equal((next as { recoveryPoint: string }).recoveryPoint, 'start');
      assert.equal((next as { failedAttempts?: number }).failedAttempts ?? 0, 0);
      assert.equal((await store().commit(ref('forget', (next as { token: number }).token), finishWith(empty(201)))).kind, 'ok');
      assert.equal((await get('forget'))?.response?.status, 201);
    });

    it('forget: refuses a started key and a stale token; a replacement past retention clears the note', async (t) => {
      if (ctx.caps.forget === false) return t.skip('no forget');
      const token = claimedToken(await store().claim(claimInput('busy', { leaseMs: 0 })));
      assert.deepEqual(await operate({ action: 'forget', ref: ref('busy', token), note: '{}' }), { kind: 'fenced' });
      assert.equal((await get('busy'))?.state, 'started');
      const done = claimedToken(await store().claim(claimInput('old')));
      await store().commit(ref('old', done), finishWith(empty(200)));
      assert.deepEqual(await operate({ action: 'forget', ref: ref('old', done - 1), note: '{}' }), { kind: 'fenced' });
      newToken(await operate({ action: 'forget', ref: ref('old', done), note: '{"n":1}' }));
      await ctx.age('old');
      assert.equal((await store().claim(claimInput('old'))).kind, 'claimed');
      assert.equal((await get('old'))?.operatorNote, undefined);
    });
  });
}
