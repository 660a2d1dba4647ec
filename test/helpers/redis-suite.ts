/**
 * The store contract, for RedisStore on one client (node-redis or ioredis, single Redis or
 * Cluster): the same behaviours test/store.test.ts checks on PostgreSQL, plus Redis's own
 * (server clock, PEXPIREAT retention, the token counter outliving the key, NOSCRIPT).
 */
import { redisSkip } from './redis.js';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { RedisStore, NO_TRANSACTION } from '../../src/redis/index.js';
import { hashKey, tokenKey } from '../../src/redis/keys.js';
import type { ClaimInput, ClaimResult, CommitRecord, KeyRef, StoredResponse } from '../../src/store/types.js';
import { randomPrefix, type TestClient } from './redis.js';

const LONG_LEASE_MS = 60_000;
const RETENTION_MS = 60_000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const fp = (n: number): Uint8Array => new Uint8Array(32).fill(n);
const claimInput = (key: string, overrides: Partial<ClaimInput> = {}): ClaimInput => ({
  scope: 'tenant-1',
  key,
  fingerprint: fp(1),
  leaseMs: LONG_LEASE_MS,
  retentionMs: RETENTION_MS,
  ...overrides,
});
function claimedToken(result: ClaimResult): number {
  assert.equal(result.kind, 'claimed', `expected a claim, got ${JSON.stringify(result)}`);
  return (result as { token: number }).token;
}
const existing = (result: ClaimResult) => {
  assert.equal(result.kind, 'exists', JSON.stringify(result));
  return (result as Extract<ClaimResult, { kind: 'exists' }>).record;
};
const phase =
  (name: string, leaseMs = LONG_LEASE_MS) =>
  (value: unknown): CommitRecord => ({ kind: 'phase', phase: name, result: value, leaseMs });
const finishWith = (response: StoredResponse) => (): CommitRecord => ({ kind: 'finish', response });
const RESPONSE: StoredResponse = {
  status: 201,
  headers: [
    ['content-type', 'application/json'],
    ['x-a', '1'],
  ],
  body: new Uint8Array([0, 1, 2, 255, 128]),
};

/** Runs the RedisStore contract on the client `open` returns. */
export function redisStoreSuite(name: string, open: () => Promise<TestClient>, options: { ownServer: boolean }): void {
  describe(`RedisStore on ${name}`, { skip: redisSkip }, () => {
    let t: TestClient;
    let prefix: string;
    let store: RedisStore;
    before(async () => {
      t = await open();
    });
    after(async () => {
      await t.close();
    });
    beforeEach(() => {
      prefix = randomPrefix();
      store = new RedisStore({ client: t.client, prefix });
    });
    afterEach(async () => {
      for (const key of touched) {
        const h = hashKey(prefix, 'tenant-1', key);
        await t.raw(h, ['DEL', h]);
        await t.raw(h, ['DEL', tokenKey(h)]);
      }
      touched.clear();
      await t.raw(`${prefix}:inflight`, ['DEL', `${prefix}:inflight`]);
    });
    const touched = new Set<string>();
    const h = (key: string) => {
      touched.add(key);
      return hashKey(prefix, 'tenant-1', key);
    };
    const raw = async (key: string, field: string) => (await t.raw(h(key), ['HGET', h(key), field])) as string | null;
    const serverNowMs = async () => {
      const [s, us] = (await t.raw(h('clock'), ['TIME'])) as [string, string];
      return Number(s) * 1000 + Math.floor(Number(us) / 1000);
    };
    /** Moves a key one hour into the past (creation and lease): past retention, its worker long gone. */
    const age = async (key: string) => {
      await t.raw(h(key), ['HINCRBY', h(key), 'ca', '-3600000']);
      if (Number(await raw(key, 'lu')) > 0) await t.raw(h(key), ['HINCRBY', h(key), 'lu', '-3600000']);
    };
    const renewLease = async (key: string) => {
      await t.raw(h(key), ['HSET', h(key), 'lu', String((await serverNowMs()) + 60_000)]);
    };
    const claim = (key: string, o: Partial<ClaimInput> = {}) => {
      touched.add(key);
      return store.claim(claimInput(key, o));
    };

    describe('claim', () => {
      it('claims a new key, then returns the existing record (fingerprint first, lease by the server clock)', async () => {
        const before = Date.now();
        const claimed = await claim('k1');
        const token = claimedToken(claimed);
        assert.deepEqual(
          Object.keys(claimed).sort(),
          ['claimId', 'kind', 'retentionRemainingMs', 'token'],
          "the retention left is the replay cache's (protocol.md K20)",
        );
        assert.match((claimed as { claimId: string }).claimId, UUID);
        assert.ok(Number.isSafeInteger(token) && token > 0, `a positive safe integer token, got ${token}`);
        const record = existing(await claim('k1', { fingerprint: fp(2) }));
        assert.equal(record.state, 'started');
        assert.deepEqual(Array.from(record.fingerprint), Array.from(fp(1)));
        assert.equal(record.recoveryPoint, 'start');
        assert.deepEqual(record.phaseResults, {});
        assert.equal(record.token, token);
        assert.equal(record.claimId, (claimed as { claimId: string }).claimId);
        assert.equal(record.leaseExpired, false);
        assert.ok(record.leaseRemainingMs > 0 && record.leaseRemainingMs <= LONG_LEASE_MS, `${record.leaseRemainingMs}`);
        assert.equal(record.response, undefined);
        assert.ok(Math.abs(record.createdAt.getTime() - before) < 60_000);
      });

      it('keeps scopes apart, also when a scope contains ":" (a:b + c is not a + b:c)', async () => {
        const s1 = await store.claim({ ...claimInput('c'), scope: 'a:b' });
        const s2 = await store.claim({ ...claimInput('b:c'), scope: 'a' });
        assert.equal(s1.kind, 'claimed');
        assert.equal(s2.kind, 'claimed');
        for (const [scope, key] of [
          ['a:b', 'c'],
          ['a', 'b:c'],
        ] as const) {
          const k = hashKey(prefix, scope, key);
          await t.raw(k, ['DEL', k, tokenKey(k)]);
        }
      });

      it('replays only to the same fingerprint: a mismatch never carries the stored body', async () => {
        const token = claimedToken(await claim('k'));
        assert.equal((await store.commit({ scope: 'tenant-1', key: 'k', token }, finishWith(RESPONSE))).kind, 'ok');
        const replay = existing(await claim('k'));
        assert.equal(replay.state, 'done');
        assert.deepEqual(replay.response, RESPONSE, 'status, headers in order and body bytes round-trip');
        const mismatch = existing(await claim('k', { fingerprint: fp(3) }));
        assert.equal(mismatch.state, 'done');
        assert.equal(mismatch.response, undefined);
      });

      it('reports a lease of 0 ms as expired', async () => {
        await claim('k', { leaseMs: 0 });
        const record = existing(await claim('k'));
        assert.equal(record.leaseExpired, true);
        assert.equal(record.leaseRemainingMs, 0);
      });

      it('treats a key past retention as absent: replaces it with a higher token and a new claim id; the old token is fenced', async () => {
        const old = claimedToken(await claim('k'));
        const oldId = (await store.get('tenant-1', 'k', RETENTION_MS))!.claimId;
        await store.commit({ scope: 'tenant-1', key: 'k', token: old }, phase('p1'));
        await age('k');
        assert.equal(await store.get('tenant-1', 'k', RETENTION_MS), undefined);
        const fresh = await claim('k', { fingerprint: fp(9) });
        assert.ok(claimedToken(fresh) > old);
        assert.notEqual((fresh as { claimId: string }).claimId, oldId);
        const record = (await store.get('tenant-1', 'k', RETENTION_MS))!;
        assert.equal(record.recoveryPoint, 'start');
        assert.deepEqual(record.phaseResults, {});
        assert.deepEqual(await store.commit({ scope: 'tenant-1', key: 'k', token: old }, phase('p2')), { kind: 'fenced' });
      });

      it('lets exactly one of 20 concurrent claims replace a key past retention', async () => {
        const old = claimedToken(await claim('k'));
        await age('k');
        const results = await Promise.all(Array.from({ length: 20 }, () => claim('k')));
        const claimed = results.filter((r) => r.kind === 'claimed');
        assert.equal(claimed.length, 1);
        const fresh = claimedToken(claimed[0]!);
        assert.ok(fresh > old);
        for (const r of results.filter((r) => r.kind === 'exists')) assert.equal(existing(r).token, fresh);
      });

      it('does not replace a key past retention while its lease is valid', async () => {
        const token = claimedToken(await claim('k'));
        await age('k');
        await renewLease('k');
        const record = existing(await claim('k', { fingerprint: fp(9) }));
        assert.equal(record.token, token);
        assert.equal(record.leaseExpired, false);
      });

      it('never replays a finished key past retention, and reports no more retention left than the server clock gives (replay fast path, and the claim script)', async () => {
        for (const replayFastPath of [true, false]) {
          store = new RedisStore({ client: t.client, prefix, replayFastPath });
          const key = `done-${replayFastPath}`;
          const token = claimedToken(await claim(key));
          await store.commit({ scope: 'tenant-1', key, token }, finishWith(RESPONSE));
          const created = Number(await raw(key, 'ca'));
          const serverBefore = await serverNowMs();
          const replayed = existing(await claim(key));
          assert.ok(replayed.response, 'replayed within retention');
          // The read ran after serverBefore by the server's clock: it had at most this much left.
          const left = replayed.retentionRemainingMs!;
          assert.ok(left <= created + RETENTION_MS - serverBefore, `retention left ${left} is bounded by the server clock`);
          assert.ok(left > 0);
          await age(key);
          const fresh = await claim(key);
          assert.equal(fresh.kind, 'claimed', 'a finished key past retention counts as absent');
          assert.ok(claimedToken(fresh) > token);
        }
      });

      it('lets exactly one of 50 concurrent claims of a new key win', async () => {
        const results = await Promise.all(Array.from({ length: 50 }, () => claim('race')));
        assert.equal(results.filter((r) => r.kind === 'claimed').length, 1);
      });
    });

    describe('retention on Redis', () => {
      it('expires the hash at creation + retention (PEXPIREAT), and a replay does not extend it', async () => {
        const token = claimedToken(await claim('k'));
        const created = Number(await raw('k', 'ca'));
        const expireAt = Number(await t.raw(h('k'), ['PEXPIRETIME', h('k')]));
        assert.equal(expireAt, created + RETENTION_MS);
        await store.commit({ scope: 'tenant-1', key: 'k', token }, finishWith(RESPONSE));
        for (let i = 0; i < 3; i++) existing(await claim('k'));
        assert.equal(Number(await t.raw(h('k'), ['PEXPIRETIME', h('k')])), created + RETENTION_MS);
        assert.ok(Number(await t.raw(h('k'), ['PEXPIRETIME', tokenKey(h('k'))])) >= created + 2 * RETENTION_MS, 'the token counter outlives the key');
      });

      it('keeps tokens growing after the key itself expired: a worker from before is still fenced', async () => {
        const old = claimedToken(await claim('short', { retentionMs: 300, leaseMs: 0 }));
        const start = performance.now();
        while ((await t.raw(h('short'), ['EXISTS', h('short')])) !== 0) {
          assert.ok(performance.now() - start < 30_000, 'the key expires');
          await new Promise((r) => setTimeout(r, 50));
        }
        const fresh = claimedToken(await claim('short'));
        assert.ok(fresh > old, `${fresh} > ${old}`);
        assert.deepEqual(await store.extendLease({ scope: 'tenant-1', key: 'short', token: old }, 1000), { kind: 'fenced' });
        // Even with the counter gone too, a new counter starts above every earlier token.
        await t.raw(h('short'), ['DEL', h('short'), tokenKey(h('short'))]);
        assert.ok(claimedToken(await claim('short')) > fresh);
      });

      it("draws a new key's token from the server clock in µs, and above a counter that is ahead of it (a clock stepped back)", async () => {
        const serverNowUs = async () => {
          const [sec, us] = (await t.raw(h('clock'), ['TIME'])) as [string, string];
          return Number(sec) * 1_000_000 + Number(us);
        };
        // Until one claim ran in the first 90 ms of a second (fewer than six digits of µs in TIME's reply).
        let after = 0;
        for (let shortMicros = false; !shortMicros; ) {
          const before = await serverNowUs();
          const token = claimedToken(await claim('fresh'));
          after = await serverNowUs();
          assert.ok(token >= before && token <= after, `token ${token} is the claim's server time in µs (${before}..${after})`);
          assert.equal(Number(await raw('fresh', 'ca')), Math.floor(token / 1000), 'creation is the same instant in ms');
          assert.equal(await t.raw(h('fresh'), ['GET', tokenKey(h('fresh'))]), String(token), 'the counter holds the token');
          assert.equal((await store.discard({ scope: 'tenant-1', key: 'fresh', token })).kind, 'ok');
          shortMicros = Math.floor(before / 1_000_000) === Math.floor(after / 1_000_000) && after % 1_000_000 < 90_000;
        }
        // A counter ahead of the clock (tokens drawn before the server's clock went back).
        const ahead = after + 10_000_000_000;
        await t.raw(h('ahead'), ['SET', tokenKey(h('ahead')), String(ahead)]);
        assert.equal(claimedToken(await claim('ahead')), ahead + 1);
        assert.equal(await t.raw(h('ahead'), ['GET', tokenKey(h('ahead'))]), String(ahead + 1));
      });
    });

    describe('takeOver', () => {
      it('takes over an expired lease with a higher token, keeping claim id, recovery point and results', async () => {
        const token = claimedToken(await claim('k'));
        await store.commit({ scope: 'tenant-1', key: 'k', token }, phase('p1', 0), async (tx) => {
          assert.equal(tx, NO_TRANSACTION);
          return { id: 7, nested: { a: [1, 'x', null] } };
        });
        const claimId = (await store.get('tenant-1', 'k', RETENTION_MS))!.claimId;
        const taken = await store.takeOver({ scope: 'tenant-1', key: 'k', token }, LONG_LEASE_MS);
        assert.equal(taken.kind, 'taken');
        const { token: newToken, ...rest } = taken as Extract<typeof taken, { kind: 'taken' }>;
        assert.deepEqual(rest, {
          kind: 'taken',
          claimId,
          recoveryPoint: 'p1',
          phaseResults: { p1: { id: 7, nested: { a: [1, 'x', null] } } },
          failedAttempts: 1,
        });
        assert.ok(newToken > token);
        assert.equal((await store.get('tenant-1', 'k', RETENTION_MS))?.leaseExpired, false);
      });

      it('loses while the lease is valid, with a stale token, on a finished key and on an absent key', async () => {
        const token = claimedToken(await claim('k'));
        assert.deepEqual(await store.takeOver({ scope: 'tenant-1', key: 'k', token }, LONG_LEASE_MS), { kind: 'lost' });
        await store.release({ scope: 'tenant-1', key: 'k', token });
        assert.deepEqual(await store.takeOver({ scope: 'tenant-1', key: 'k', token: token - 1 }, LONG_LEASE_MS), { kind: 'lost' });
        const t2 = (await store.takeOver({ scope: 'tenant-1', key: 'k', token }, LONG_LEASE_MS)) as { token: number };
        await store.commit({ scope: 'tenant-1', key: 'k', token: t2.token }, finishWith(RESPONSE));
        assert.deepEqual(await store.takeOver({ scope: 'tenant-1', key: 'k', token: t2.token }, LONG_LEASE_MS), { kind: 'lost' });
        touched.add('nope');
        assert.deepEqual(await store.takeOver({ scope: 'tenant-1', key: 'nope', token: 0 }, LONG_LEASE_MS), { kind: 'lost' });
      });

      it('lets only one of ten takeovers with the same token win', async () => {
        const token = claimedToken(await claim('k', { leaseMs: 0 }));
        const results = await Promise.all(Array.from({ length: 10 }, () => store.takeOver({ scope: 'tenant-1', key: 'k', token }, LONG_LEASE_MS)));
        assert.equal(results.filter((r) => r.kind === 'taken').length, 1);
      });
    });

    describe('commit, finish, extendLease, release', () => {
      it('records phases (lease renewed) and the finish; a stale worker is fenced AFTER its effects ran (not atomic on Redis)', async () => {
        const token = claimedToken(await claim('k', { leaseMs: 0 }));
        const ref: KeyRef = { scope: 'tenant-1', key: 'k', token };
        assert.deepEqual(await store.commit(ref, phase('a'), async () => 1), { kind: 'ok', value: 1 });
        const rec = (await store.get('tenant-1', 'k', RETENTION_MS))!;
        assert.equal(rec.recoveryPoint, 'a');
        assert.equal(rec.leaseExpired, false, 'the phase renewed the lease');
        await store.release(ref);
        const taken = (await store.takeOver(ref, LONG_LEASE_MS)) as { token: number };
        let ran = 0;
        const stale = await store.commit(ref, phase('b'), async () => ++ran);
        assert.deepEqual(stale, { kind: 'fenced' });
        assert.equal(ran, 1, 'the effects ran: Redis cannot roll them back');
        assert.equal((await store.get('tenant-1', 'k', RETENTION_MS))!.recoveryPoint, 'a', 'nothing recorded');
        const newRef = { ...ref, token: taken.token };
        assert.deepEqual(await store.commit(newRef, finishWith(RESPONSE)), { kind: 'ok', value: undefined });
        assert.deepEqual(await store.commit(newRef, finishWith(RESPONSE)), { kind: 'fenced' }, 'a finished key takes no second finish');
        const done = (await store.get('tenant-1', 'k', RETENTION_MS))!;
        assert.equal(done.state, 'done');
        assert.equal(done.recoveryPoint, 'finished');
        assert.deepEqual(done.phaseResults, { a: 1 });
        assert.deepEqual(done.response, RESPONSE);
      });

      it('does not record when the effects throw', async () => {
        const token = claimedToken(await claim('k'));
        await assert.rejects(
          store.commit({ scope: 'tenant-1', key: 'k', token }, phase('a'), async () => {
            throw new Error('boom');
          }),
          /boom/,
        );
        assert.equal((await store.get('tenant-1', 'k', RETENTION_MS))!.recoveryPoint, 'start');
      });

      it('extends the lease by the server clock, fenced', async () => {
        const token = claimedToken(await claim('k', { leaseMs: 0 }));
        assert.deepEqual(await store.extendLease({ scope: 'tenant-1', key: 'k', token }, 30_000), { kind: 'ok', value: undefined });
        const rec = (await store.get('tenant-1', 'k', RETENTION_MS))!;
        assert.ok(rec.leaseRemainingMs > 20_000 && rec.leaseRemainingMs <= 30_000, `${rec.leaseRemainingMs}`);
        assert.deepEqual(await store.extendLease({ scope: 'tenant-1', key: 'k', token: token + 1 }, 30_000), { kind: 'fenced' });
      });

      it('release keeps the recovery point; discard deletes a key with no phase (new claim id, higher token) and releases one with a phase', async () => {
        const claimed = await claim('k');
        const token = claimedToken(claimed);
        assert.deepEqual(await store.discard({ scope: 'tenant-1', key: 'k', token }), { kind: 'ok', value: 'deleted' });
        assert.equal(await store.get('tenant-1', 'k', RETENTION_MS), undefined);
        const again = await claim('k');
        assert.ok(claimedToken(again) > token);
        assert.notEqual((again as { claimId: string }).claimId, (claimed as { claimId: string }).claimId);
        const ref = { scope: 'tenant-1', key: 'k', token: claimedToken(again) };
        await store.commit(ref, phase('p'));
        assert.deepEqual(await store.discard(ref), { kind: 'ok', value: 'released' });
        const rec = (await store.get('tenant-1', 'k', RETENTION_MS))!;
        assert.equal(rec.recoveryPoint, 'p');
        assert.equal(rec.leaseExpired, true);
        assert.deepEqual(await store.release({ ...ref, token }), { kind: 'fenced' });
      });
    });

    describe('completer: saveRequest and listAbandoned', () => {
      const snapshot = { method: 'POST', url: '/v1/charges?x=1', contentType: 'application/json', body: new Uint8Array([0, 123, 255]) };
      const list = (graceMs = 0) => store.listAbandoned({ limit: 100, graceMs, retentionMs: RETENTION_MS });

      it('lists an expired lease with its snapshot, a released key without one; never a live, in-grace, finished or past-retention key', async () => {
        const token = claimedToken(await claim('k', { leaseMs: 0 }));
        assert.deepEqual(await store.saveRequest({ scope: 'tenant-1', key: 'k', token }, snapshot), { kind: 'ok', value: undefined });
        const rel = claimedToken(await claim('rel'));
        await store.release({ scope: 'tenant-1', key: 'rel', token: rel });
        claimedToken(await claim('live'));
        const done = claimedToken(await claim('done', { leaseMs: 0 }));
        await store.commit({ scope: 'tenant-1', key: 'done', token: done }, finishWith(RESPONSE));
        claimedToken(await claim('old', { leaseMs: 0 }));
        await age('old');
        assert.deepEqual(await list(60_000), [], 'a released lease ended at the release: inside a 60 s grace too (protocol.md K10)');
        const found = await list(0);
        assert.deepEqual(found.map((a) => a.record.key).sort(), ['k', 'rel'], 'with no grace: the expired and the released lease');
        const byKey = new Map(found.map((a) => [a.record.key, a]));
        assert.equal(byKey.get('rel')!.request, undefined);
        assert.deepEqual(byKey.get('k')!.request, snapshot);
        assert.equal(byKey.get('k')!.record.token, token);
      });

      it('fences saveRequest, and lets one of two completers take a listed key over', async () => {
        const token = claimedToken(await claim('k', { leaseMs: 0 }));
        const [a, b] = await Promise.all([list(), list()]);
        const results = await Promise.all([a[0]!, b[0]!].map((x) => store.takeOver({ scope: 'tenant-1', key: 'k', token: x.record.token }, LONG_LEASE_MS)));
        assert.deepEqual(results.map((r) => r.kind).sort(), ['lost', 'taken']);
        assert.deepEqual(await list(), []);
        assert.deepEqual(await store.saveRequest({ scope: 'tenant-1', key: 'k', token }, snapshot), { kind: 'fenced' });
        assert.equal(await raw('k', 'rq'), null);
      });
    });

    // SCRIPT FLUSH only on a server the tests started (the shared Redis may serve other runs).
    describe('scripts', { skip: !options.ownServer && 'shared Redis: no SCRIPT FLUSH' }, () => {
      it('reloads the scripts after SCRIPT FLUSH (NOSCRIPT → EVAL)', async () => {
        claimedToken(await claim('k'));
        await t.raw(h('k'), ['SCRIPT', 'FLUSH']);
        existing(await claim('k'));
        claimedToken(await claim('k2'));
      });
    });
  });
}
