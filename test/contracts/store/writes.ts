/**
 * Store contract, part: the completer's saveRequest and listAbandoned, commit (effects and record together, rolled back when fenced or thrown), finish, extendLease and release/discard.
 * Registered by `storeContract` (test/contracts/store.ts) for every store.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { KeyRef, StoredResponse } from '../../../src/store/types.js';
import {
  LONG_LEASE_MS,
  SCOPE,
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
export function writeSuite(c: ContractContext): void {
  const { h, store, ref, age, snapshot, get, claimAndTakeOver } = c;
  describe('completer: saveRequest and listAbandoned', { skip: c.caps.completion === false && 'the store does not declare completion' }, () => {
    const snapshotOf = { method: 'POST', url: '/v1/charges?x=1', contentType: 'application/json', body: new Uint8Array([0, 123, 255]) };
    const list = (graceMs = 0) => store().listAbandoned!({ limit: 100, graceMs, retentionMs: RETENTION_MS });
    const saveRequest = (r: KeyRef, s = snapshotOf) => store().saveRequest!(r, s);

    it('lists a started key whose lease expired, with its request snapshot byte for byte', async () => {
      const token = claimedToken(await store().claim(claimInput('k', { leaseMs: 0 })));
      assert.deepEqual(await saveRequest(ref('k', token)), { kind: 'ok', value: undefined });
      const found = await list();
      assert.equal(found.length, 1, 'one abandoned key');
      assert.equal(found[0]!.record.key, 'k');
      assert.equal(found[0]!.record.token, token);
      assert.deepEqual(found[0]!.request, snapshotOf, 'the snapshot round-trips, binary body included');
    });

    it('lists a released key and one without a snapshot (request undefined)', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().release(ref('k', token));
      const found = await list();
      assert.deepEqual(
        found.map((a) => a.record.key),
        ['k'],
        'a released lease has ended: listed with no grace',
      );
      assert.equal(found[0]!.request, undefined);
    });

    it('a released key is not listed as abandoned before graceMs', async () => {
      // protocol.md K10: the client that saw the throw retries with the same key; the
      // completer must not hold the key first (the retry would get 409).
      const token = claimedToken(await store().claim(claimInput('k')));
      await saveRequest(ref('k', token));
      await store().release(ref('k', token));
      assert.deepEqual(await list(60_000), [], 'released just now: inside a 60 s grace');
      await h().age(SCOPE, 'k', 30_000); // released (and created) 30 s ago, within retention
      assert.deepEqual(await list(60_000), [], 'released 30 s ago: still inside a 60 s grace');
      assert.deepEqual(
        (await list(20_000)).map((a) => a.record.key),
        ['k'],
        'released 30 s ago: past a 20 s grace',
      );
    });

    it('a retry takes a released key over at once, before the grace ends', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().release(ref('k', token));
      const taken = await store().takeOver(ref('k', token), LONG_LEASE_MS);
      assert.equal(taken.kind, 'taken', 'the lease ended at the release');
      assert.deepEqual(await list(), [], 'held again by the retry');
    });

    it('never lists a live lease, a lease inside the grace, a finished key or a key past retention', async () => {
      claimedToken(await store().claim(claimInput('live')));
      claimedToken(await store().claim(claimInput('grace', { leaseMs: 0 })));
      const done = claimedToken(await store().claim(claimInput('done', { leaseMs: 0 })));
      await store().commit(ref('done', done), finishWith(empty(201)));
      claimedToken(await store().claim(claimInput('old', { leaseMs: 0 })));
      await age('old');
      assert.deepEqual(await list(60_000), [], 'grace 60 s: the just-expired lease is not abandoned yet');
      assert.deepEqual(
        (await list(0)).map((a) => a.record.key),
        ['grace'],
      );
    });

    it('drops the request snapshot when a row past retention is replaced (docs/model MUT_REPLACE_KEEPS_REQUEST)', async () => {
      const old = claimedToken(await store().claim(claimInput('k', { leaseMs: 0 })));
      await saveRequest(ref('k', old));
      await age('k');
      // Another request claims the key past retention, then crashes before saving its own
      // snapshot: the completer must not find the old request on the new claim.
      claimedToken(await store().claim(claimInput('k', { fingerprint: fp(9), leaseMs: 0 })));
      const found = await list();
      assert.equal(found.length, 1);
      assert.equal(found[0]!.request, undefined, 'the completer would discard it, not run the old request');
    });

    it('discards a listed key only while it is still as listed (discardAbandoned is a compare-and-set)', async (t) => {
      if (!store().discardAbandoned) return t.skip('this store has no discardAbandoned');
      const token = claimedToken(await store().claim(claimInput('k', { leaseMs: 0 })));
      const [listed] = await list();
      // The worker's lease ran out, but it still saves its request before the completer acts.
      await saveRequest(ref('k', token));
      assert.deepEqual(await store().discardAbandoned!(ref('k', listed!.record.token)), { kind: 'fenced' }, 'a saved request keeps the key');
      assert.equal((await list()).length, 1, 'the key is still there');
      const other = claimedToken(await store().claim(claimInput('empty', { leaseMs: 0 })));
      assert.deepEqual(await store().discardAbandoned!(ref('empty', other)), { kind: 'ok', value: undefined });
      assert.deepEqual(
        (await list()).map((a) => a.record.key),
        ['k'],
        'the untouched key was deleted',
      );
    });

    it('fences saveRequest: a stale token stores nothing', async () => {
      const { ref: current, stale } = await claimAndTakeOver('k');
      const before = await snapshot('k');
      assert.deepEqual(await saveRequest(stale), { kind: 'fenced' });
      assert.deepEqual(await snapshot('k'), before);
      await store().release(current);
      assert.equal((await list())[0]?.request, undefined, 'the stale snapshot was not stored');
    });

    it('lets one of two completers take a listed key over (compare-and-set on the token)', async () => {
      claimedToken(await store().claim(claimInput('k', { leaseMs: 0 })));
      const [a, b] = await Promise.all([list(), list()]);
      const results = await Promise.all([a![0]!, b![0]!].map((x) => store().takeOver(ref('k', x.record.token), LONG_LEASE_MS)));
      assert.deepEqual(results.map((r) => r.kind).sort(), ['lost', 'taken']);
      assert.deepEqual(await list(), [], 'a taken-over key is no longer abandoned');
    });
  });

  describe('commit', () => {
    it('commits effects, recovery point and phase result together and renews the lease', async () => {
      const token = claimedToken(await store().claim(claimInput('k', { leaseMs: 0 })));
      const first = await store().commit(ref('k', token), phase('order_created'), h().effect('order'));
      assert.deepEqual(first, { kind: 'ok', value: { note: 'order' } });
      const second = await store().commit(ref('k', token), phase('psp_charged'), async () => ({ charge: 'ch_1', at: null }));
      assert.equal(second.kind, 'ok');

      assert.deepEqual(await h().effects(), ['order']);
      const record = await get('k');
      assert.ok(record, 'record');
      assert.equal(record.recoveryPoint, 'psp_charged');
      assert.deepEqual(record.phaseResults, { order_created: { note: 'order' }, psp_charged: { charge: 'ch_1', at: null } });
      assert.equal(record.leaseExpired, false, 'the phase renewed the lease that was claimed already expired');
      assert.equal(record.state, 'started');
    });

    it('records a phase without effects', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      const result = await store().commit(ref('k', token), () => ({ kind: 'phase', phase: 'p', result: { n: 1 }, leaseMs: LONG_LEASE_MS }));
      assert.deepEqual(result, { kind: 'ok', value: undefined });
      assert.deepEqual((await get('k'))?.phaseResults, { p: { n: 1 } });
    });

    it('is fenced with a stale token and rolls back the effects', async () => {
      const { stale } = await claimAndTakeOver('k');
      const before = await snapshot('k');
      assert.deepEqual(await store().commit(stale, phase('p1'), h().effect('stale')), { kind: 'fenced' });
      await expectEffects(c, [], ['stale'], 'the stale worker’s effect was rolled back');
      assert.deepEqual(await snapshot('k'), before);
    });

    it('is fenced when the token moves on while the effects run, in their transaction (the fenced write shares it)', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      const result = await store().commit(ref('k', token), phase('p1'), async (tx) => {
        const value = await h().effect('raced')(tx);
        await h().staleInTx(tx, SCOPE, 'k'); // a takeover racing this commit, inside its transaction
        return value;
      });
      assert.deepEqual(result, { kind: 'fenced' });
      await expectEffects(c, [], ['raced'], 'the raced effect was rolled back');
      if (c.caps.atomicEffects !== false && !c.caps.sentWhole)
        assert.equal(await h().tokenOf(SCOPE, 'k'), token, 'the token move rolled back with the effects');
    });

    it('rolls back everything and rethrows when the effects throw', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().commit(ref('k', token), phase('p1'), h().effect('kept'));
      const boom = new Error('boom');
      await assert.rejects(
        store().commit(ref('k', token), phase('p2'), async (tx) => {
          await h().effect('lost')(tx);
          throw boom;
        }),
        (error) => error === boom,
      );
      await expectEffects(c, ['kept'], ['kept', 'lost']);
      const record = await get('k');
      assert.equal(record?.recoveryPoint, 'p1');
      assert.deepEqual(record?.phaseResults, { p1: { note: 'kept' } });
    });

    it('rolls back the effects when recording throws', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      const bad = new TypeError('bad record');
      await assert.rejects(
        store().commit(
          ref('k', token),
          () => {
            throw bad;
          },
          h().effect('lost'),
        ),
        (error) => error === bad,
      );
      await expectEffects(c, [], ['lost']);
    });

    it('keeps working after many failed and fenced commits (connections go back to the pool)', async () => {
      const { ref: current, stale } = await claimAndTakeOver('k');
      for (let i = 0; i < 25; i++) {
        await assert.rejects(store().commit(current, phase('p'), async () => Promise.reject(new Error(`fail ${i}`))));
        assert.deepEqual(await store().commit(stale, phase('p'), h().effect('stale')), { kind: 'fenced' });
      }
      assert.deepEqual(await store().commit(current, phase('p'), h().effect('ok')), { kind: 'ok', value: { note: 'ok' } });
      await expectEffects(c, ['ok'], [...Array<string>(25).fill('stale'), 'ok']);
    });
  });

  describe('finish', () => {
    const binary = new Uint8Array([0x00, 0xff, 0x7b, 0x00, 0x80, 0x0a, 0x0d, 0xfe, 0x00]);

    it('stores status, headers and exact binary body bytes, and a later claim returns them', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      const response: StoredResponse = {
        status: 402,
        headers: [
          ['content-type', 'application/octet-stream'],
          ['link', '<https://a>; rel="a"'],
          ['link', '<https://b>; rel="b"'],
        ],
        body: binary,
      };
      assert.equal((await store().commit(ref('k', token), finishWith(response))).kind, 'ok');
      const record = existing(await store().claim(claimInput('k')));
      assert.equal(record.state, 'done');
      assert.equal(record.recoveryPoint, 'finished');
      assert.ok(record.response, 'record.response');
      assert.equal(record.response.status, 402);
      assert.deepEqual(record.response.headers, response.headers);
      assert.ok(record.response.body instanceof Uint8Array, 'record.response.body instanceof Uint8Array');
      assert.deepEqual(Array.from(record.response.body), Array.from(binary));
      assert.equal(record.leaseExpired, true, 'the lease is cleared');
    });

    it('stores an empty body as empty bytes', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().commit(ref('k', token), finishWith({ status: 204, headers: [], body: new Uint8Array(0) }));
      const record = await get('k');
      assert.equal(record?.response?.status, 204);
      assert.deepEqual(record?.response?.headers, []);
      assert.ok(record?.response?.body instanceof Uint8Array);
      assert.equal(record?.response?.body.length, 0);
    });

    it('commits the last effects together with the response', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      const response: StoredResponse = { status: 201, headers: [], body: binary };
      const result = await store().commit<StoredResponse>(
        ref('k', token),
        (r) => ({ kind: 'finish', response: r }),
        async (tx) => {
          await h().effect('paid')(tx);
          return response;
        },
      );
      assert.deepEqual(result, { kind: 'ok', value: response });
      assert.deepEqual(await h().effects(), ['paid']);
      assert.equal((await get('k'))?.state, 'done');
    });

    it('is final: a second finish or phase with the same token is fenced and the first response stays', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().commit(ref('k', token), finishWith({ status: 200, headers: [], body: new Uint8Array([1]) }));
      assert.deepEqual(await store().commit(ref('k', token), finishWith({ status: 500, headers: [], body: new Uint8Array([2]) })), {
        kind: 'fenced',
      });
      assert.deepEqual(await store().commit(ref('k', token), phase('late'), h().effect('late')), { kind: 'fenced' });
      await expectEffects(c, [], ['late']);
      const record = await get('k');
      assert.equal(record?.response?.status, 200);
      assert.deepEqual(Array.from(record?.response?.body ?? []), [1]);
    });
  });

  describe('extendLease', () => {
    it('extends an expired lease while the token is current', async () => {
      const token = claimedToken(await store().claim(claimInput('k', { leaseMs: 0 })));
      assert.deepEqual(await store().extendLease(ref('k', token), LONG_LEASE_MS), { kind: 'ok', value: undefined });
      const record = await get('k');
      assert.equal(record?.leaseExpired, false);
      assert.ok((record?.leaseRemainingMs ?? 0) > LONG_LEASE_MS - 10_000, `lease remaining ${record?.leaseRemainingMs} ms`);
    });

    it('is fenced with a stale token', async () => {
      const { stale } = await claimAndTakeOver('k');
      assert.deepEqual(await store().extendLease(stale, LONG_LEASE_MS), { kind: 'fenced' });
    });

    it('is fenced on a finished key', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().commit(ref('k', token), finishWith(empty()));
      const before = await snapshot('k');
      assert.deepEqual(await store().extendLease(ref('k', token), LONG_LEASE_MS), { kind: 'fenced' });
      assert.deepEqual(await snapshot('k'), before);
      assert.equal((await get('k'))?.leaseExpired, true);
    });
  });

  describe('release', () => {
    it('keeps the recovery point and expires the lease so a takeover succeeds at once', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().commit(ref('k', token), phase('p1'), h().effect('order'));
      assert.deepEqual(await store().release(ref('k', token)), { kind: 'ok', value: 'released' });
      const record = await get('k');
      assert.equal(record?.leaseExpired, true);
      assert.equal(record?.recoveryPoint, 'p1');
      assert.deepEqual(record?.phaseResults, { p1: { note: 'order' } });
      assert.deepEqual(await h().effects(), ['order']);
      const taken = await store().takeOver(ref('k', token), LONG_LEASE_MS);
      assert.equal(taken.kind, 'taken');
      const { token: newToken, ...rest } = taken as Extract<typeof taken, { kind: 'taken' }>;
      assert.deepEqual(rest, { kind: 'taken', claimId: record?.claimId, recoveryPoint: 'p1', phaseResults: { p1: { note: 'order' } }, failedAttempts: 0 });
      assert.ok(newToken > token, `takeover token ${newToken} must exceed ${token}`);
    });

    it('with discard deletes a key on which no phase committed', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      assert.deepEqual(await store().discard(ref('k', token)), { kind: 'ok', value: 'deleted' });
      assert.equal(await h().count(), 0);
      // The client may fix the request and retry with the same key.
      assert.equal((await store().claim(claimInput('k', { fingerprint: fp(5) }))).kind, 'claimed');
    });

    it('with discard only releases a key with a committed phase', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().commit(ref('k', token), phase('p1'), h().effect('order'));
      assert.deepEqual(await store().discard(ref('k', token)), { kind: 'ok', value: 'released' });
      const record = await get('k');
      assert.ok(record, 'the row is kept');
      assert.equal(record.recoveryPoint, 'p1');
      assert.equal(record.leaseExpired, true);
    });

    it('is fenced with a stale token, with or without discard', async () => {
      const { stale } = await claimAndTakeOver('k');
      assert.deepEqual(await store().release(stale), { kind: 'fenced' });
      assert.deepEqual(await store().discard(stale), { kind: 'fenced' });
      assert.equal(await h().count(), 1);
      assert.equal((await get('k'))?.leaseExpired, false);
    });
  });
}
