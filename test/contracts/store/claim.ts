/**
 * Store contract, part: claim (new key, existing key, in progress, retention counts as absent), replay and mismatch reads, the claim id, get and takeOver.
 * Registered by `storeContract` (test/contracts/store.ts) for every store.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SCOPE, LONG_LEASE_MS, fp, claimInput, claimedToken, claimedId, existing, phase, finishWith, empty, type ContractContext } from './shared.js';
import { RETENTION_MS } from './shared.js';

/** Registers this part of the store contract. */
export function claimSuite(c: ContractContext): void {
  const { h, store, ref, age, renewLease, snapshot, get, claimAndTakeOver } = c;
  describe('claim', () => {
    it('claims a new key with a positive token, then returns the existing record with that token', async () => {
      const before = Date.now();
      const claimed = await store().claim(claimInput('k1'));
      const token = claimedToken(claimed);
      const optional = ['retentionRemainingMs', 'sealed']; // the replay cache's (protocol.md K20)
      assert.deepEqual(
        Object.keys(claimed)
          .filter((k) => !optional.includes(k))
          .sort(),
        ['claimId', 'kind', 'token'],
      );
      assert.ok(Number.isSafeInteger(token) && token > 0, `a positive integer token, got ${token}`);
      const record = existing(await store().claim(claimInput('k1', { fingerprint: fp(2) })));
      assert.equal(record.scope, SCOPE);
      assert.equal(record.key, 'k1');
      assert.equal(record.state, 'started');
      assert.deepEqual(Array.from(record.fingerprint), Array.from(fp(1)), 'the stored fingerprint is the first one');
      assert.equal(record.recoveryPoint, 'start');
      assert.deepEqual(record.phaseResults, {});
      assert.equal(record.token, token);
      assert.equal(record.leaseExpired, false);
      assert.ok(record.leaseRemainingMs > 0 && record.leaseRemainingMs <= LONG_LEASE_MS, `${record.leaseRemainingMs}`);
      assert.equal(record.response, undefined);
      assert.ok(record.createdAt instanceof Date, 'record.createdAt instanceof Date');
      assert.ok(Math.abs(record.createdAt.getTime() - before) < 60_000, 'created_at is now, by the store clock');
      assert.equal(await h().count(), 1);
    });

    it('reports the retention left by its own clock, when it reports it at all (protocol.md K20)', async () => {
      const claimed = await store().claim(claimInput('left'));
      claimedToken(claimed);
      const ownLeft = claimed.kind === 'claimed' ? claimed.retentionRemainingMs : undefined;
      if (ownLeft !== undefined) assert.equal(ownLeft, RETENTION_MS, "a new key's whole retention is left");
      await store().commit(ref('left', claimedToken(claimed)), finishWith(empty(201)));
      const fresh = existing(await store().claim(claimInput('left')));
      if (fresh.retentionRemainingMs === undefined) {
        assert.equal(ownLeft, undefined, 'a store that reports it on a claim reports it on a read');
        return;
      }
      assert.ok(fresh.retentionRemainingMs > RETENTION_MS - 30_000 && fresh.retentionRemainingMs <= RETENTION_MS, `${fresh.retentionRemainingMs}`);
      const shorter = existing(await store().claim(claimInput('left', { retentionMs: RETENTION_MS / 2 })));
      assert.ok(shorter.retentionRemainingMs! <= RETENTION_MS / 2, 'judged with the retention of the read');
      const read = await get('left');
      assert.ok(read?.retentionRemainingMs === undefined || read.retentionRemainingMs <= RETENTION_MS);
    });

    it('keeps keys of different scopes apart', async () => {
      const t1 = claimedToken(await store().claim(claimInput('k')));
      const t2 = claimedToken(await store().claim(claimInput('k', { scope: 'tenant-2' })));
      assert.equal(await h().count(), 2);
      assert.equal((await get('k'))?.token, t1);
      assert.equal((await get('k', 'tenant-2'))?.token, t2);
    });

    it('reports a lease of 0 ms as expired', async () => {
      await store().claim(claimInput('k', { leaseMs: 0 }));
      const record = existing(await store().claim(claimInput('k')));
      assert.equal(record.leaseExpired, true);
      assert.equal(record.leaseRemainingMs, 0);
    });

    it('treats a row past retention as absent: replaces it with a higher token', async () => {
      const old = claimedToken(await store().claim(claimInput('k')));
      await store().commit(ref('k', old), phase('p1'), h().effect('first'));
      await age('k');
      assert.equal(await get('k'), undefined, 'get ignores a row past retention');
      assert.equal(await h().count(), 1, 'the row is still there before the claim');

      const fresh = claimedToken(await store().claim(claimInput('k', { fingerprint: fp(9) })));
      assert.ok(fresh > old, `new token ${fresh} must exceed old token ${old}`);
      const record = await get('k');
      assert.ok(record, 'record');
      assert.equal(record.token, fresh);
      assert.equal(record.state, 'started');
      assert.equal(record.recoveryPoint, 'start');
      assert.deepEqual(record.phaseResults, {});
      assert.deepEqual(Array.from(record.fingerprint), Array.from(fp(9)));
      assert.ok(Date.now() - record.createdAt.getTime() < 30 * 60_000, 'created_at is reset');
      assert.equal(record.leaseExpired, false);

      // The worker holding the old row's token can no longer write.
      assert.deepEqual(await store().commit(ref('k', old), phase('p2')), { kind: 'fenced' });
    });

    it('replaces a finished row past retention, dropping its response', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().commit(ref('k', token), finishWith({ status: 201, headers: [], body: new Uint8Array([1]) }));
      await age('k');
      const fresh = claimedToken(await store().claim(claimInput('k')));
      assert.ok(fresh > token, `new token ${fresh} must exceed old token ${token}`);
      const record = await get('k');
      assert.equal(record?.state, 'started');
      assert.equal(record?.response, undefined);
      assert.equal(existing(await store().claim(claimInput('k'))).response, undefined, 'a claim reads no old response either');
    });

    it('lets exactly one of many concurrent claims replace a row past retention', async () => {
      const old = claimedToken(await store().claim(claimInput('k')));
      await age('k');
      const results = await Promise.all(Array.from({ length: 20 }, () => store().claim(claimInput('k'))));
      const claimed = results.filter((r) => r.kind === 'claimed');
      assert.equal(claimed.length, 1);
      const fresh = claimedToken(claimed[0]!);
      assert.ok(fresh > old, `new token ${fresh} must exceed old token ${old}`);
      for (const r of results.filter((r) => r.kind === 'exists')) assert.equal(existing(r).token, fresh);
      assert.equal(await h().count(), 1);
      assert.equal(await h().tokenOf(SCOPE, 'k'), fresh);
    });

    it('does not replace a row past retention while its lease is valid: the claim reports it as existing', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().commit(ref('k', token), phase('p1'), h().effect('first'));
      await age('k');
      await renewLease('k'); // the worker is alive past retention (its heartbeat runs)
      const before = await snapshot('k');

      for (const fingerprint of [fp(1), fp(9)]) {
        const record = existing(await store().claim(claimInput('k', { fingerprint })));
        assert.equal(record.token, token);
        assert.equal(record.state, 'started');
        assert.equal(record.leaseExpired, false);
        assert.ok(record.leaseRemainingMs > 0, `lease remaining ${record.leaseRemainingMs} ms`);
        assert.equal(record.recoveryPoint, 'p1');
        assert.deepEqual(Array.from(record.fingerprint), Array.from(fp(1)), 'the live row keeps its fingerprint');
      }
      assert.deepEqual(await snapshot('k'), before, 'the live row is untouched');
      // Its worker goes on and finishes.
      assert.equal((await store().commit(ref('k', token), finishWith({ status: 201, headers: [], body: new Uint8Array([1]) }))).kind, 'ok');
      assert.deepEqual(await h().effects(), ['first']);
    });
  });

  describe('replay and mismatch', () => {
    it('returns a finished key with its response to a claim with the same fingerprint', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().commit(ref('k', token), finishWith({ status: 201, headers: [['content-type', 'text/plain']], body: new Uint8Array([7]) }));
      const record = existing(await store().claim(claimInput('k')));
      assert.equal(record.state, 'done');
      assert.equal(record.response?.status, 201);
      assert.deepEqual(record.response?.headers, [['content-type', 'text/plain']]);
      assert.deepEqual(Array.from(record.response?.body ?? []), [7]);
    });

    it('returns a finished key with its own fingerprint to a claim with another one (the mismatch)', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().commit(ref('k', token), finishWith(empty(201)));
      const record = existing(await store().claim(claimInput('k', { fingerprint: fp(2) })));
      assert.equal(record.state, 'done');
      assert.deepEqual(Array.from(record.fingerprint), Array.from(fp(1)), 'the stored fingerprint, for the caller to compare');
      assert.equal(record.token, token);
    });
  });

  describe('claim id', () => {
    it('is reported by claim and returned with the existing record', async () => {
      const id = claimedId(await store().claim(claimInput('k')));
      assert.equal(existing(await store().claim(claimInput('k'))).claimId, id);
      assert.equal((await get('k'))?.claimId, id);
      assert.notEqual(claimedId(await store().claim(claimInput('k2'))), id, 'each key has its own claim id');
    });

    it('is kept by a takeover', async () => {
      const id = claimedId(await store().claim(claimInput('k', { leaseMs: 0 })));
      const token = (await h().tokenOf(SCOPE, 'k'))!;
      const taken = await store().takeOver(ref('k', token), LONG_LEASE_MS);
      assert.equal(taken.kind, 'taken');
      assert.equal((taken as { claimId: string }).claimId, id, 'the takeover continues the claim');
      assert.ok((taken as { token: number }).token > token, 'with a new token');
      assert.equal((await get('k'))?.claimId, id);
    });

    it('changes when the key is claimed again after a discard', async () => {
      const id = claimedId(await store().claim(claimInput('k')));
      const token = (await h().tokenOf(SCOPE, 'k'))!;
      assert.deepEqual(await store().discard(ref('k', token)), { kind: 'ok', value: 'deleted' });
      const next = claimedId(await store().claim(claimInput('k')));
      assert.notEqual(next, id, 'a claim after a discard is a new claim');
      assert.equal((await get('k'))?.claimId, next);
    });

    it('changes when a row past retention is replaced', async () => {
      const id = claimedId(await store().claim(claimInput('k')));
      const token = (await h().tokenOf(SCOPE, 'k'))!;
      await store().commit(ref('k', token), finishWith({ status: 201, headers: [], body: new Uint8Array([1]) }));
      await age('k');
      const next = claimedId(await store().claim(claimInput('k', { fingerprint: fp(2) })));
      assert.notEqual(next, id, 'a claim past retention is a new claim');
      assert.equal((await get('k'))?.claimId, next);
    });
  });

  describe('get', () => {
    it('returns undefined for an absent key', async () => {
      assert.equal(await get('nope'), undefined);
    });
  });

  describe('takeOver', () => {
    it('takes over an expired lease with a higher token, keeping recovery point and results', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().commit(ref('k', token), phase('p1', 0), async () => ({ id: 7 }));
      const claimId = (await get('k'))?.claimId;
      const taken = await store().takeOver(ref('k', token), LONG_LEASE_MS);
      assert.equal(taken.kind, 'taken');
      const { token: newToken, ...rest } = taken as Extract<typeof taken, { kind: 'taken' }>;
      assert.deepEqual(rest, { kind: 'taken', claimId, recoveryPoint: 'p1', phaseResults: { p1: { id: 7 } }, failedAttempts: 1 });
      assert.ok(newToken > token, `takeover token ${newToken} must exceed ${token}`);
      const record = await get('k');
      assert.equal(record?.token, newToken);
      assert.equal(record?.leaseExpired, false);
    });

    it('takes over a lease that ran out (in progress until then)', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      assert.equal(existing(await store().claim(claimInput('k'))).leaseExpired, false, 'in progress');
      await h().setLease(SCOPE, 'k', -1000);
      assert.equal(existing(await store().claim(claimInput('k'))).leaseExpired, true, 'abandoned');
      assert.equal((await store().takeOver(ref('k', token), LONG_LEASE_MS)).kind, 'taken');
    });

    it('loses while the lease is still valid', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      assert.deepEqual(await store().takeOver(ref('k', token), LONG_LEASE_MS), { kind: 'lost' });
      assert.equal((await get('k'))?.token, token);
    });

    it('loses with a stale token even when the lease has expired', async () => {
      const { ref: current, stale } = await claimAndTakeOver('k');
      await store().release(current); // the lease is over again; the token is current's
      assert.deepEqual(await store().takeOver(stale, LONG_LEASE_MS), { kind: 'lost' });
      assert.equal(await h().tokenOf(SCOPE, 'k'), current.token, 'the stale takeover changed nothing');
      const taken = await store().takeOver(current, LONG_LEASE_MS);
      assert.equal(taken.kind, 'taken');
      assert.ok((taken as { token: number }).token > current.token, 'a second takeover gets a higher token again');
    });

    it('lets only one of two takeovers with the same token win', async () => {
      const token = claimedToken(await store().claim(claimInput('k', { leaseMs: 0 })));
      const results = await Promise.all([store().takeOver(ref('k', token), LONG_LEASE_MS), store().takeOver(ref('k', token), LONG_LEASE_MS)]);
      assert.deepEqual(results.map((r) => r.kind).sort(), ['lost', 'taken']);
    });

    it('never takes over a finished key', async () => {
      const token = claimedToken(await store().claim(claimInput('k')));
      await store().commit(ref('k', token), finishWith(empty()));
      assert.deepEqual(await store().takeOver(ref('k', token), LONG_LEASE_MS), { kind: 'lost' });
    });

    it('loses on an absent key', async () => {
      assert.deepEqual(await store().takeOver(ref('nope', 0), LONG_LEASE_MS), { kind: 'lost' });
    });
  });
}
