/**
 * The store contract: what every IdempotencyStore must do, run over every store in
 * test/helpers/stores.ts by test/store-contract.test.ts. Claim, replay, mismatch and
 * in-progress reads, takeover with a higher token, every write after the claim fenced, effects
 * rolled back when fenced, release and discard, retention counts as absent, sweep (where the
 * store has it), the completer's saveRequest and listAbandoned, and concurrent claims.
 *
 * The contract reaches a store's state only through the factory's backdoors (age a key, set
 * its lease, read its token, count effects), never through SQL; PostgreSQL-only behaviour
 * (SQL shapes, migrations, columns, partitions, blobs, encryption) is tested in its own files.
 */
import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ClaimInput, ClaimResult, CommitRecord, IdempotencyStore, KeyRef, StoredResponse } from '../../src/store/types.js';
import { InvalidOptionError } from '../../src/core/errors.js';
import { useStoreBackend, type StoreFactory, type StoreHarness } from './stores.js';

const SCOPE = 'tenant-1';
const LONG_LEASE_MS = 60_000;
const RETENTION_MS = 60_000;
/** How far `age` moves a key back: past RETENTION_MS and past any LONG_LEASE_MS lease. */
const HOUR_MS = 60 * 60_000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const fp = (n: number): Uint8Array => new Uint8Array(32).fill(n);

/** A claim of `key` in SCOPE with a long lease and RETENTION_MS; `overrides` change any field. */
export function claimInput(key: string, overrides: Partial<ClaimInput> = {}): ClaimInput {
  return { scope: SCOPE, key, fingerprint: fp(1), leaseMs: LONG_LEASE_MS, retentionMs: RETENTION_MS, ...overrides };
}

/** The token of a claim that must have been won. */
export function claimedToken(result: ClaimResult): number {
  assert.equal(result.outcome, 'claimed', `expected a claim, got ${JSON.stringify(result)}`);
  return (result as { token: number }).token;
}

const claimedId = (result: ClaimResult): string => {
  assert.equal(result.outcome, 'claimed', `expected a claim, got ${JSON.stringify(result)}`);
  const { claimId } = result as { claimId: string };
  assert.match(claimId, UUID);
  return claimId;
};

const existing = (result: ClaimResult) => {
  assert.equal(result.outcome, 'exists', `expected an existing record, got ${JSON.stringify(result)}`);
  return (result as Extract<ClaimResult, { outcome: 'exists' }>).record;
};

const phase = (name: string, leaseMs = LONG_LEASE_MS) => (value: unknown): CommitRecord => ({ kind: 'phase', phase: name, result: value, leaseMs });
const finishWith = (response: StoredResponse) => (): CommitRecord => ({ kind: 'finish', response });
const empty = (status = 200): StoredResponse => ({ status, headers: [], body: new Uint8Array() });

/** Runs the store contract over the store `factory` opens; call inside a `describe`. */
export function storeContract(factory: StoreFactory): void {
  const conn = useStoreBackend(factory);
  let h: StoreHarness;
  let store: IdempotencyStore;
  const caps = factory.capabilities;

  beforeEach(async () => {
    h = await conn.backend().fresh();
    store = h.store;
  });
  afterEach(async () => {
    await h.drop();
  });

  const ref = (key: string, token: number): KeyRef => ({ scope: SCOPE, key, token });
  const age = (key: string) => h.age(SCOPE, key, HOUR_MS);
  const renewLease = (key: string) => h.setLease(SCOPE, key, LONG_LEASE_MS);
  const snapshot = (key: string) => h.snapshot(SCOPE, key);
  const get = (key: string, scope = SCOPE) => store.get(scope, key, RETENTION_MS);
  /**
   * The effects that took hold: `atomic` on a store whose commit is one transaction with its
   * effects; `notAtomic` on one with `atomicEffects: false` (RedisStore's NoTransaction), where
   * effects that ran before a fenced or failed commit stay, and the contract checks that
   * nothing was recorded instead.
   */
  const expectEffects = async (atomic: string[], notAtomic: string[], message?: string) =>
    assert.deepEqual(await h.effects(), caps.atomicEffects === false ? notAtomic : atomic, message);
  /**
   * Claims `key` with a lease that is already over, then takes it over. `ref` holds the new
   * token; `stale` the claim's token, which the takeover superseded.
   */
  const claimAndTakeOver = async (key: string): Promise<{ ref: KeyRef; stale: KeyRef }> => {
    const token = claimedToken(await store.claim(claimInput(key, { leaseMs: 0 })));
    const taken = await store.takeOver(ref(key, token), LONG_LEASE_MS);
    assert.equal(taken.outcome, 'taken');
    const newToken = (taken as { token: number }).token;
    assert.ok(newToken > token, `the takeover token ${newToken} must exceed the claim token ${token}`);
    return { ref: ref(key, newToken), stale: ref(key, token) };
  };

  describe('claim', () => {
    it('claims a new key with a positive token, then returns the existing record with that token', async () => {
      const before = Date.now();
      const claimed = await store.claim(claimInput('k1'));
      const token = claimedToken(claimed);
      assert.deepEqual(Object.keys(claimed).sort(), ['claimId', 'outcome', 'token']);
      assert.ok(Number.isSafeInteger(token) && token > 0, `a positive integer token, got ${token}`);
      const record = existing(await store.claim(claimInput('k1', { fingerprint: fp(2) })));
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
      assert.equal(await h.count(), 1);
    });

    it('keeps keys of different scopes apart', async () => {
      const t1 = claimedToken(await store.claim(claimInput('k')));
      const t2 = claimedToken(await store.claim(claimInput('k', { scope: 'tenant-2' })));
      assert.equal(await h.count(), 2);
      assert.equal((await get('k'))?.token, t1);
      assert.equal((await get('k', 'tenant-2'))?.token, t2);
    });

    it('reports a lease of 0 ms as expired', async () => {
      await store.claim(claimInput('k', { leaseMs: 0 }));
      const record = existing(await store.claim(claimInput('k')));
      assert.equal(record.leaseExpired, true);
      assert.equal(record.leaseRemainingMs, 0);
    });

    it('treats a row past retention as absent: replaces it with a higher token', async () => {
      const old = claimedToken(await store.claim(claimInput('k')));
      await store.commit(ref('k', old), phase('p1'), h.effect('first'));
      await age('k');
      assert.equal(await get('k'), undefined, 'get ignores a row past retention');
      assert.equal(await h.count(), 1, 'the row is still there before the claim');

      const fresh = claimedToken(await store.claim(claimInput('k', { fingerprint: fp(9) })));
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
      assert.deepEqual(await store.commit(ref('k', old), phase('p2')), { outcome: 'fenced' });
    });

    it('replaces a finished row past retention, dropping its response', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      await store.commit(ref('k', token), finishWith({ status: 201, headers: [], body: new Uint8Array([1]) }));
      await age('k');
      const fresh = claimedToken(await store.claim(claimInput('k')));
      assert.ok(fresh > token, `new token ${fresh} must exceed old token ${token}`);
      const record = await get('k');
      assert.equal(record?.state, 'started');
      assert.equal(record?.response, undefined);
      assert.equal(existing(await store.claim(claimInput('k'))).response, undefined, 'a claim reads no old response either');
    });

    it('lets exactly one of many concurrent claims replace a row past retention', async () => {
      const old = claimedToken(await store.claim(claimInput('k')));
      await age('k');
      const results = await Promise.all(Array.from({ length: 20 }, () => store.claim(claimInput('k'))));
      const claimed = results.filter((r) => r.outcome === 'claimed');
      assert.equal(claimed.length, 1);
      const fresh = claimedToken(claimed[0]!);
      assert.ok(fresh > old, `new token ${fresh} must exceed old token ${old}`);
      for (const r of results.filter((r) => r.outcome === 'exists')) assert.equal(existing(r).token, fresh);
      assert.equal(await h.count(), 1);
      assert.equal(await h.tokenOf(SCOPE, 'k'), fresh);
    });

    it('does not replace a row past retention while its lease is valid: the claim reports it as existing', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      await store.commit(ref('k', token), phase('p1'), h.effect('first'));
      await age('k');
      await renewLease('k'); // the worker is alive past retention (its heartbeat runs)
      const before = await snapshot('k');

      for (const fingerprint of [fp(1), fp(9)]) {
        const record = existing(await store.claim(claimInput('k', { fingerprint })));
        assert.equal(record.token, token);
        assert.equal(record.state, 'started');
        assert.equal(record.leaseExpired, false);
        assert.ok(record.leaseRemainingMs > 0, `lease remaining ${record.leaseRemainingMs} ms`);
        assert.equal(record.recoveryPoint, 'p1');
        assert.deepEqual(Array.from(record.fingerprint), Array.from(fp(1)), 'the live row keeps its fingerprint');
      }
      assert.deepEqual(await snapshot('k'), before, 'the live row is untouched');
      // Its worker goes on and finishes.
      assert.equal((await store.commit(ref('k', token), finishWith({ status: 201, headers: [], body: new Uint8Array([1]) }))).outcome, 'ok');
      assert.deepEqual(await h.effects(), ['first']);
    });
  });

  describe('replay and mismatch', () => {
    it('returns a finished key with its response to a claim with the same fingerprint', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      await store.commit(ref('k', token), finishWith({ status: 201, headers: [['content-type', 'text/plain']], body: new Uint8Array([7]) }));
      const record = existing(await store.claim(claimInput('k')));
      assert.equal(record.state, 'done');
      assert.equal(record.response?.status, 201);
      assert.deepEqual(record.response?.headers, [['content-type', 'text/plain']]);
      assert.deepEqual(Array.from(record.response?.body ?? []), [7]);
    });

    it('returns a finished key with its own fingerprint to a claim with another one (the mismatch)', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      await store.commit(ref('k', token), finishWith(empty(201)));
      const record = existing(await store.claim(claimInput('k', { fingerprint: fp(2) })));
      assert.equal(record.state, 'done');
      assert.deepEqual(Array.from(record.fingerprint), Array.from(fp(1)), 'the stored fingerprint, for the caller to compare');
      assert.equal(record.token, token);
    });
  });

  describe('claim id', () => {
    it('is reported by claim and returned with the existing record', async () => {
      const id = claimedId(await store.claim(claimInput('k')));
      assert.equal(existing(await store.claim(claimInput('k'))).claimId, id);
      assert.equal((await get('k'))?.claimId, id);
      assert.notEqual(claimedId(await store.claim(claimInput('k2'))), id, 'each key has its own claim id');
    });

    it('is kept by a takeover', async () => {
      const id = claimedId(await store.claim(claimInput('k', { leaseMs: 0 })));
      const token = (await h.tokenOf(SCOPE, 'k'))!;
      const taken = await store.takeOver(ref('k', token), LONG_LEASE_MS);
      assert.equal(taken.outcome, 'taken');
      assert.equal((taken as { claimId: string }).claimId, id, 'the takeover continues the claim');
      assert.ok((taken as { token: number }).token > token, 'with a new token');
      assert.equal((await get('k'))?.claimId, id);
    });

    it('changes when the key is claimed again after a discard', async () => {
      const id = claimedId(await store.claim(claimInput('k')));
      const token = (await h.tokenOf(SCOPE, 'k'))!;
      assert.deepEqual(await store.release(ref('k', token), { discard: true }), { outcome: 'ok', value: 'deleted' });
      const next = claimedId(await store.claim(claimInput('k')));
      assert.notEqual(next, id, 'a claim after a discard is a new claim');
      assert.equal((await get('k'))?.claimId, next);
    });

    it('changes when a row past retention is replaced', async () => {
      const id = claimedId(await store.claim(claimInput('k')));
      const token = (await h.tokenOf(SCOPE, 'k'))!;
      await store.commit(ref('k', token), finishWith({ status: 201, headers: [], body: new Uint8Array([1]) }));
      await age('k');
      const next = claimedId(await store.claim(claimInput('k', { fingerprint: fp(2) })));
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
      const token = claimedToken(await store.claim(claimInput('k')));
      await store.commit(ref('k', token), phase('p1', 0), async () => ({ id: 7 }));
      const claimId = (await get('k'))?.claimId;
      const taken = await store.takeOver(ref('k', token), LONG_LEASE_MS);
      assert.equal(taken.outcome, 'taken');
      const { token: newToken, ...rest } = taken as Extract<typeof taken, { outcome: 'taken' }>;
      assert.deepEqual(rest, { outcome: 'taken', claimId, recoveryPoint: 'p1', phaseResults: { p1: { id: 7 } } });
      assert.ok(newToken > token, `takeover token ${newToken} must exceed ${token}`);
      const record = await get('k');
      assert.equal(record?.token, newToken);
      assert.equal(record?.leaseExpired, false);
    });

    it('takes over a lease that ran out (in progress until then)', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      assert.equal(existing(await store.claim(claimInput('k'))).leaseExpired, false, 'in progress');
      await h.setLease(SCOPE, 'k', -1000);
      assert.equal(existing(await store.claim(claimInput('k'))).leaseExpired, true, 'abandoned');
      assert.equal((await store.takeOver(ref('k', token), LONG_LEASE_MS)).outcome, 'taken');
    });

    it('loses while the lease is still valid', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      assert.deepEqual(await store.takeOver(ref('k', token), LONG_LEASE_MS), { outcome: 'lost' });
      assert.equal((await get('k'))?.token, token);
    });

    it('loses with a stale token even when the lease has expired', async () => {
      const { ref: current, stale } = await claimAndTakeOver('k');
      await store.release(current); // the lease is over again; the token is current's
      assert.deepEqual(await store.takeOver(stale, LONG_LEASE_MS), { outcome: 'lost' });
      assert.equal(await h.tokenOf(SCOPE, 'k'), current.token, 'the stale takeover changed nothing');
      const taken = await store.takeOver(current, LONG_LEASE_MS);
      assert.equal(taken.outcome, 'taken');
      assert.ok((taken as { token: number }).token > current.token, 'a second takeover gets a higher token again');
    });

    it('lets only one of two takeovers with the same token win', async () => {
      const token = claimedToken(await store.claim(claimInput('k', { leaseMs: 0 })));
      const results = await Promise.all([store.takeOver(ref('k', token), LONG_LEASE_MS), store.takeOver(ref('k', token), LONG_LEASE_MS)]);
      assert.deepEqual(results.map((r) => r.outcome).sort(), ['lost', 'taken']);
    });

    it('never takes over a finished key', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      await store.commit(ref('k', token), finishWith(empty()));
      assert.deepEqual(await store.takeOver(ref('k', token), LONG_LEASE_MS), { outcome: 'lost' });
    });

    it('loses on an absent key', async () => {
      assert.deepEqual(await store.takeOver(ref('nope', 0), LONG_LEASE_MS), { outcome: 'lost' });
    });
  });

  describe('completer: saveRequest and listAbandoned', () => {
    const snapshotOf = { method: 'POST', url: '/v1/charges?x=1', contentType: 'application/json', body: new Uint8Array([0, 123, 255]) };
    const list = (graceMs = 0) => store.listAbandoned!({ limit: 100, graceMs, retentionMs: RETENTION_MS });
    const saveRequest = (r: KeyRef, s = snapshotOf) => store.saveRequest!(r, s);

    it('lists a started key whose lease expired, with its request snapshot byte for byte', async () => {
      const token = claimedToken(await store.claim(claimInput('k', { leaseMs: 0 })));
      assert.deepEqual(await saveRequest(ref('k', token)), { outcome: 'ok', value: undefined });
      const found = await list();
      assert.equal(found.length, 1, 'one abandoned key');
      assert.equal(found[0]!.record.key, 'k');
      assert.equal(found[0]!.record.token, token);
      assert.deepEqual(found[0]!.request, snapshotOf, 'the snapshot round-trips, binary body included');
    });

    it('lists a released key and one without a snapshot (request undefined)', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      await store.release(ref('k', token));
      const found = await list(60_000);
      assert.deepEqual(found.map((a) => a.record.key), ['k'], 'a released lease counts at once, whatever the grace');
      assert.equal(found[0]!.request, undefined);
    });

    it('never lists a live lease, a lease inside the grace, a finished key or a key past retention', async () => {
      claimedToken(await store.claim(claimInput('live')));
      claimedToken(await store.claim(claimInput('grace', { leaseMs: 0 })));
      const done = claimedToken(await store.claim(claimInput('done', { leaseMs: 0 })));
      await store.commit(ref('done', done), finishWith(empty(201)));
      claimedToken(await store.claim(claimInput('old', { leaseMs: 0 })));
      await age('old');
      assert.deepEqual(await list(60_000), [], 'grace 60 s: the just-expired lease is not abandoned yet');
      assert.deepEqual((await list(0)).map((a) => a.record.key), ['grace']);
    });

    it('fences saveRequest: a stale token stores nothing', async () => {
      const { ref: current, stale } = await claimAndTakeOver('k');
      const before = await snapshot('k');
      assert.deepEqual(await saveRequest(stale), { outcome: 'fenced' });
      assert.deepEqual(await snapshot('k'), before);
      await store.release(current);
      assert.equal((await list())[0]?.request, undefined, 'the stale snapshot was not stored');
    });

    it('lets one of two completers take a listed key over (compare-and-set on the token)', async () => {
      claimedToken(await store.claim(claimInput('k', { leaseMs: 0 })));
      const [a, b] = await Promise.all([list(), list()]);
      const results = await Promise.all([a![0]!, b![0]!].map((x) => store.takeOver(ref('k', x.record.token), LONG_LEASE_MS)));
      assert.deepEqual(results.map((r) => r.outcome).sort(), ['lost', 'taken']);
      assert.deepEqual(await list(), [], 'a taken-over key is no longer abandoned');
    });
  });

  describe('commit', () => {
    it('commits effects, recovery point and phase result together and renews the lease', async () => {
      const token = claimedToken(await store.claim(claimInput('k', { leaseMs: 0 })));
      const first = await store.commit(ref('k', token), phase('order_created'), h.effect('order'));
      assert.deepEqual(first, { outcome: 'ok', value: { note: 'order' } });
      const second = await store.commit(ref('k', token), phase('psp_charged'), async () => ({ charge: 'ch_1', at: null }));
      assert.equal(second.outcome, 'ok');

      assert.deepEqual(await h.effects(), ['order']);
      const record = await get('k');
      assert.ok(record, 'record');
      assert.equal(record.recoveryPoint, 'psp_charged');
      assert.deepEqual(record.phaseResults, { order_created: { note: 'order' }, psp_charged: { charge: 'ch_1', at: null } });
      assert.equal(record.leaseExpired, false, 'the phase renewed the lease that was claimed already expired');
      assert.equal(record.state, 'started');
    });

    it('records a phase without effects', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      const result = await store.commit(ref('k', token), () => ({ kind: 'phase', phase: 'p', result: { n: 1 }, leaseMs: LONG_LEASE_MS }));
      assert.deepEqual(result, { outcome: 'ok', value: undefined });
      assert.deepEqual((await get('k'))?.phaseResults, { p: { n: 1 } });
    });

    it('is fenced with a stale token and rolls back the effects', async () => {
      const { stale } = await claimAndTakeOver('k');
      const before = await snapshot('k');
      assert.deepEqual(await store.commit(stale, phase('p1'), h.effect('stale')), { outcome: 'fenced' });
      await expectEffects([], ['stale'], 'the stale worker’s effect was rolled back');
      assert.deepEqual(await snapshot('k'), before);
    });

    it('rolls back everything and rethrows when the effects throw', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      await store.commit(ref('k', token), phase('p1'), h.effect('kept'));
      const boom = new Error('boom');
      await assert.rejects(
        store.commit(ref('k', token), phase('p2'), async (tx) => {
          await h.effect('lost')(tx);
          throw boom;
        }),
        (error) => error === boom,
      );
      await expectEffects(['kept'], ['kept', 'lost']);
      const record = await get('k');
      assert.equal(record?.recoveryPoint, 'p1');
      assert.deepEqual(record?.phaseResults, { p1: { note: 'kept' } });
    });

    it('rolls back the effects when recording throws', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      const bad = new TypeError('bad record');
      await assert.rejects(
        store.commit(ref('k', token), () => {
          throw bad;
        }, h.effect('lost')),
        (error) => error === bad,
      );
      await expectEffects([], ['lost']);
    });

    it('keeps working after many failed and fenced commits (connections go back to the pool)', async () => {
      const { ref: current, stale } = await claimAndTakeOver('k');
      for (let i = 0; i < 25; i++) {
        await assert.rejects(store.commit(current, phase('p'), async () => Promise.reject(new Error(`fail ${i}`))));
        assert.deepEqual(await store.commit(stale, phase('p'), h.effect('stale')), { outcome: 'fenced' });
      }
      assert.deepEqual(await store.commit(current, phase('p'), h.effect('ok')), { outcome: 'ok', value: { note: 'ok' } });
      await expectEffects(['ok'], [...Array<string>(25).fill('stale'), 'ok']);
    });
  });

  describe('finish', () => {
    const binary = new Uint8Array([0x00, 0xff, 0x7b, 0x00, 0x80, 0x0a, 0x0d, 0xfe, 0x00]);

    it('stores status, headers and exact binary body bytes, and a later claim returns them', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      const response: StoredResponse = {
        status: 402,
        headers: [
          ['content-type', 'application/octet-stream'],
          ['link', '<https://a>; rel="a"'],
          ['link', '<https://b>; rel="b"'],
        ],
        body: binary,
      };
      assert.equal((await store.commit(ref('k', token), finishWith(response))).outcome, 'ok');
      const record = existing(await store.claim(claimInput('k')));
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
      const token = claimedToken(await store.claim(claimInput('k')));
      await store.commit(ref('k', token), finishWith({ status: 204, headers: [], body: new Uint8Array(0) }));
      const record = await get('k');
      assert.equal(record?.response?.status, 204);
      assert.deepEqual(record?.response?.headers, []);
      assert.ok(record?.response?.body instanceof Uint8Array);
      assert.equal(record?.response?.body.length, 0);
    });

    it('commits the last effects together with the response', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      const response: StoredResponse = { status: 201, headers: [], body: binary };
      const result = await store.commit<StoredResponse>(
        ref('k', token),
        (r) => ({ kind: 'finish', response: r }),
        async (tx) => {
          await h.effect('paid')(tx);
          return response;
        },
      );
      assert.deepEqual(result, { outcome: 'ok', value: response });
      assert.deepEqual(await h.effects(), ['paid']);
      assert.equal((await get('k'))?.state, 'done');
    });

    it('is final: a second finish or phase with the same token is fenced and the first response stays', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      await store.commit(ref('k', token), finishWith({ status: 200, headers: [], body: new Uint8Array([1]) }));
      assert.deepEqual(await store.commit(ref('k', token), finishWith({ status: 500, headers: [], body: new Uint8Array([2]) })), {
        outcome: 'fenced',
      });
      assert.deepEqual(await store.commit(ref('k', token), phase('late'), h.effect('late')), { outcome: 'fenced' });
      await expectEffects([], ['late']);
      const record = await get('k');
      assert.equal(record?.response?.status, 200);
      assert.deepEqual(Array.from(record?.response?.body ?? []), [1]);
    });
  });

  describe('extendLease', () => {
    it('extends an expired lease while the token is current', async () => {
      const token = claimedToken(await store.claim(claimInput('k', { leaseMs: 0 })));
      assert.deepEqual(await store.extendLease(ref('k', token), LONG_LEASE_MS), { outcome: 'ok', value: undefined });
      const record = await get('k');
      assert.equal(record?.leaseExpired, false);
      assert.ok((record?.leaseRemainingMs ?? 0) > LONG_LEASE_MS - 10_000, `lease remaining ${record?.leaseRemainingMs} ms`);
    });

    it('is fenced with a stale token', async () => {
      const { stale } = await claimAndTakeOver('k');
      assert.deepEqual(await store.extendLease(stale, LONG_LEASE_MS), { outcome: 'fenced' });
    });

    it('is fenced on a finished key', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      await store.commit(ref('k', token), finishWith(empty()));
      const before = await snapshot('k');
      assert.deepEqual(await store.extendLease(ref('k', token), LONG_LEASE_MS), { outcome: 'fenced' });
      assert.deepEqual(await snapshot('k'), before);
      assert.equal((await get('k'))?.leaseExpired, true);
    });
  });

  describe('release', () => {
    it('keeps the recovery point and expires the lease so a takeover succeeds at once', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      await store.commit(ref('k', token), phase('p1'), h.effect('order'));
      assert.deepEqual(await store.release(ref('k', token)), { outcome: 'ok', value: 'released' });
      const record = await get('k');
      assert.equal(record?.leaseExpired, true);
      assert.equal(record?.recoveryPoint, 'p1');
      assert.deepEqual(record?.phaseResults, { p1: { note: 'order' } });
      assert.deepEqual(await h.effects(), ['order']);
      const taken = await store.takeOver(ref('k', token), LONG_LEASE_MS);
      assert.equal(taken.outcome, 'taken');
      const { token: newToken, ...rest } = taken as Extract<typeof taken, { outcome: 'taken' }>;
      assert.deepEqual(rest, { outcome: 'taken', claimId: record?.claimId, recoveryPoint: 'p1', phaseResults: { p1: { note: 'order' } } });
      assert.ok(newToken > token, `takeover token ${newToken} must exceed ${token}`);
    });

    it('with discard deletes a key on which no phase committed', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      assert.deepEqual(await store.release(ref('k', token), { discard: true }), { outcome: 'ok', value: 'deleted' });
      assert.equal(await h.count(), 0);
      // The client may fix the request and retry with the same key.
      assert.equal((await store.claim(claimInput('k', { fingerprint: fp(5) }))).outcome, 'claimed');
    });

    it('with discard only releases a key with a committed phase', async () => {
      const token = claimedToken(await store.claim(claimInput('k')));
      await store.commit(ref('k', token), phase('p1'), h.effect('order'));
      assert.deepEqual(await store.release(ref('k', token), { discard: true }), { outcome: 'ok', value: 'released' });
      const record = await get('k');
      assert.ok(record, 'the row is kept');
      assert.equal(record.recoveryPoint, 'p1');
      assert.equal(record.leaseExpired, true);
    });

    it('is fenced with a stale token, with or without discard', async () => {
      const { stale } = await claimAndTakeOver('k');
      assert.deepEqual(await store.release(stale), { outcome: 'fenced' });
      assert.deepEqual(await store.release(stale, { discard: true }), { outcome: 'fenced' });
      assert.equal(await h.count(), 1);
      assert.equal((await get('k'))?.leaseExpired, false);
    });
  });

  describe('fencing', () => {
    it('lets no write with the old token change the row after a takeover', async () => {
      const token = claimedToken(await store.claim(claimInput('k', { leaseMs: 0 })));
      const old = ref('k', token);
      await store.commit(old, phase('p1', 0), async () => 'done-by-old');
      const taken = await store.takeOver(old, LONG_LEASE_MS);
      assert.equal(taken.outcome, 'taken');
      const current = { ...old, token: (taken as { token: number }).token };
      await store.commit(current, phase('p2'), h.effect('by-new'));
      const before = await snapshot('k');

      assert.deepEqual(await store.commit(old, phase('p3'), h.effect('by-old')), { outcome: 'fenced' });
      assert.deepEqual(await store.commit(old, phase('p3')), { outcome: 'fenced' });
      assert.deepEqual(await store.commit(old, finishWith({ status: 200, headers: [], body: new Uint8Array([9]) }), h.effect('by-old')), {
        outcome: 'fenced',
      });
      assert.deepEqual(await store.commit(old, finishWith({ status: 200, headers: [], body: new Uint8Array([9]) })), { outcome: 'fenced' });
      assert.deepEqual(await store.extendLease(old, LONG_LEASE_MS), { outcome: 'fenced' });
      assert.deepEqual(await store.release(old), { outcome: 'fenced' });
      assert.deepEqual(await store.release(old, { discard: true }), { outcome: 'fenced' });
      assert.deepEqual(await store.takeOver(old, LONG_LEASE_MS), { outcome: 'lost' });
      if (store.saveRequest) assert.deepEqual(await store.saveRequest(old, { method: 'POST', url: '/', contentType: null, body: null }), { outcome: 'fenced' });

      assert.deepEqual(await snapshot('k'), before);
      await expectEffects(['by-new'], ['by-new', 'by-old', 'by-old']);
    });

    it('hands out strictly increasing tokens for one key across claim, takeover, discard, claim, retention, sweep and claim', async () => {
      const tokens: number[] = [];
      const t0 = claimedToken(await store.claim(claimInput('k', { leaseMs: 0 })));
      tokens.push(t0);
      const taken = await store.takeOver(ref('k', t0), LONG_LEASE_MS);
      assert.equal(taken.outcome, 'taken');
      const t1 = (taken as { token: number }).token;
      tokens.push(t1);
      assert.deepEqual(await store.release(ref('k', t1), { discard: true }), { outcome: 'ok', value: 'deleted' });
      assert.equal(await h.count(), 0);
      // Other keys drawing tokens in between must not matter.
      await store.claim(claimInput('other'));
      const t2 = claimedToken(await store.claim(claimInput('k', { fingerprint: fp(2) })));
      tokens.push(t2);
      await store.commit(ref('k', t2), finishWith(empty()));
      await age('k');
      const t3 = claimedToken(await store.claim(claimInput('k', { fingerprint: fp(3) }))); // replaces the row past retention
      tokens.push(t3);
      if (h.sweepKey) {
        assert.equal(await h.sweepKey(SCOPE, 'k'), 1, 'the swept row');
        tokens.push(claimedToken(await store.claim(claimInput('k', { fingerprint: fp(4) }))));
      }
      for (let i = 1; i < tokens.length; i++) {
        assert.ok(tokens[i]! > Math.max(...tokens.slice(0, i)), `token ${i} (${tokens[i]}) must exceed every earlier one: ${tokens.join(', ')}`);
      }
      // Every earlier token is fenced on the latest claim.
      const before = await snapshot('k');
      for (const token of tokens.slice(0, -1)) {
        const stale = ref('k', token);
        assert.deepEqual(await store.commit(stale, phase('late'), h.effect(`stale-${token}`)), { outcome: 'fenced' }, `token ${token}`);
        assert.deepEqual(await store.commit(stale, finishWith(empty(500))), { outcome: 'fenced' });
        assert.deepEqual(await store.extendLease(stale, LONG_LEASE_MS), { outcome: 'fenced' });
        assert.deepEqual(await store.release(stale, { discard: true }), { outcome: 'fenced' });
      }
      assert.deepEqual(await snapshot('k'), before);
      await expectEffects([], tokens.slice(0, -1).map((token) => `stale-${token}`));
    });

    it('fences a stale worker out of a claim made after a discard', async () => {
      // Worker A claims and hangs; its lease runs out and B takes over, then B discards (the
      // request failed validation); the client's fixed request claims the key again.
      const { ref: b, stale: a } = await claimAndTakeOver('k');
      assert.deepEqual(await store.release(b, { discard: true }), { outcome: 'ok', value: 'deleted' });
      const c = ref('k', claimedToken(await store.claim(claimInput('k', { fingerprint: fp(7) }))));
      assert.ok(c.token > b.token && c.token > a.token, `the new claim's token ${c.token} exceeds ${a.token} and ${b.token}`);
      const before = await snapshot('k');
      for (const stale of [a, b]) {
        assert.deepEqual(await store.commit(stale, phase('late'), h.effect('stale')), { outcome: 'fenced' });
        assert.deepEqual(await store.release(stale), { outcome: 'fenced' });
      }
      assert.deepEqual(await snapshot('k'), before);
      await expectEffects([], ['stale', 'stale']);
      assert.deepEqual(await store.commit(c, phase('p1'), h.effect('fresh')), { outcome: 'ok', value: { note: 'fresh' } });
      await expectEffects(['fresh'], ['stale', 'stale', 'fresh']);
    });
  });

  describe('sweep', { skip: caps.sweep !== 'rows' && `sweep: ${caps.sweep || 'none'}` }, () => {
    const sweep = (options?: { retentionMs?: number; batchSize?: number }) => h.sweep!(options);

    it('deletes only rows past retention, in batches, and leaves live rows', async () => {
      for (let i = 0; i < 10; i++) {
        const token = claimedToken(await store.claim(claimInput(`old-${i}`)));
        if (i % 2 === 0) await store.commit(ref(`old-${i}`, token), finishWith(empty()));
        await age(`old-${i}`);
      }
      for (let i = 0; i < 4; i++) await store.claim(claimInput(`live-${i}`));
      assert.equal(await sweep({ retentionMs: RETENTION_MS, batchSize: 3 }), 10);
      for (let i = 0; i < 4; i++) assert.ok(await get(`live-${i}`), `live-${i} stays`);
      assert.equal(await sweep({ retentionMs: RETENTION_MS, batchSize: 3 }), 0, 'nothing left to sweep');
      assert.equal(await h.count(), 4);
    });

    it('leaves a row past retention alone while its lease is valid, and deletes it once the lease expired', async () => {
      const token = claimedToken(await store.claim(claimInput('live')));
      await store.commit(ref('live', token), phase('p1'), h.effect('live'));
      await age('live');
      await renewLease('live'); // its worker is still running past retention
      assert.equal(await sweep({ retentionMs: RETENTION_MS }), 0);
      assert.equal(await h.count(), 1);
      assert.equal(await h.tokenOf(SCOPE, 'live'), token);

      await h.setLease(SCOPE, 'live', -1000);
      assert.equal(await sweep({ retentionMs: RETENTION_MS }), 1, 'the lease ran out: now it is swept');
      assert.equal(await h.count(), 0);
    });

    it('keeps fresh rows with the default 24 h retention', async () => {
      await store.claim(claimInput('k'));
      assert.equal(await sweep(), 0);
      assert.equal(await h.count(), 1);
    });

    it('rejects a batch size below 1', async () => {
      await assert.rejects(sweep({ batchSize: 0 }), InvalidOptionError);
    });
  });

  describe('concurrency', () => {
    it('gives exactly one of 50 concurrent claims on one key the claim, and "exists" to all others', async () => {
      for (let round = 0; round < 3; round++) {
        const key = `race-${round}`;
        const settled = await Promise.allSettled(Array.from({ length: 50 }, () => store.claim(claimInput(key))));
        assert.deepEqual(settled.filter((s) => s.status === 'rejected'), [], 'no claim may throw');
        const results = settled.map((s) => (s as PromiseFulfilledResult<ClaimResult>).value);
        const claimed = results.filter((r) => r.outcome === 'claimed');
        assert.equal(claimed.length, 1, `round ${round}: exactly one claim`);
        const token = claimedToken(claimed[0]!);
        const others = results.filter((r) => r.outcome === 'exists');
        assert.equal(others.length, 49);
        for (const r of others) {
          const record = existing(r);
          assert.equal(record.token, token);
          assert.equal(record.state, 'started');
          assert.equal(record.leaseExpired, false);
        }
      }
      assert.equal(await h.count(), 3);
    });

    it('commits 30 phases at once, each with its effects in its own transaction', async () => {
      const refs = await Promise.all(Array.from({ length: 30 }, async (_, i) => ref(`k${i}`, claimedToken(await store.claim(claimInput(`k${i}`))))));
      const results = await Promise.all(refs.map((r) => store.commit(r, phase('p'), h.effect(r.key))));
      assert.ok(results.every((r) => r.outcome === 'ok'), 'every phase committed');
      assert.equal((await h.effects()).length, 30);
    });
  });
}
