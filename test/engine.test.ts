/**
 * The engine and its executions over every store of test/helpers/stores.ts `suiteStores` (the
 * memory store on virtual time, PostgresStore on PGlite and, when DATABASE_URL is set, on
 * PostgreSQL, plain and partitioned): claim, decide, take over, atomic phases, calls, heartbeat, release, discard.
 * Tests that wait for a lease to run out wait on the suite's clock: real time on a database,
 * node:test mock timers on the memory store (the fast tier, `npm run test:fast`).
 */
import { after, afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { suiteStores, useStoreBackend, type StoreHarness } from './helpers/stores.js';
import { eventually as eventuallyOn, realTime, virtualTime } from './helpers/wait.js';
import { IdempotencyEngine, type BeginResult, type EngineOptions } from '../src/engine/engine.js';
import type { Execution, IdempotencyEvent } from '../src/engine/execution.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { IdempotencyStore, StoredResponse } from '../src/store/types.js';
import { deriveKey } from '../src/core/derived-key.js';
import {
  ErrorCode,
  ExecutionClosedError,
  InvalidKeyError,
  InvalidOptionError,
  InvalidPhaseError,
  InvalidScopeError,
  LeaseLostError,
  StoreUnavailableError,
} from '../src/core/errors.js';

type X = Execution<unknown>;
const SCOPE = 'tenant-1';
const FP = new Uint8Array(32).fill(1);
const OTHER_FP = new Uint8Array(32).fill(2);
/** A short lease, for tests that wait for it to run out. */
const SHORT_LEASE_MS = 200;

const response = (status: number, body: number[] = []): StoredResponse => ({
  status,
  headers: [['content-type', 'application/octet-stream']],
  body: new Uint8Array(body),
});

function executionOf(result: BeginResult<unknown>): X {
  assert.equal(result.kind, 'execute', `expected execute, got ${result.kind}`);
  return (result as Extract<BeginResult<unknown>, { kind: 'execute' }>).execution;
}

for (const factory of suiteStores) {
  describe(`IdempotencyEngine on ${factory.name}`, () => {
    const conn = useStoreBackend(factory);
    const time = factory.capabilities.virtualTime ? virtualTime : realTime;
    const sleep = (ms: number) => time.sleep(ms);
    /** Calls `probe` every 20 ms until `done` holds for its result, or fails after `timeoutMs` (on the suite's clock). */
    const eventually = <T>(probe: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 3000) => eventuallyOn(probe, done, { timeoutMs, time });
    let h: StoreHarness;
    let closed = false;
    const open: X[] = [];

    beforeEach(async () => {
      h = await conn.backend().fresh();
      time.start();
    });
    afterEach(async () => {
      // Stop any heartbeat still running before its table disappears.
      for (const x of open.splice(0)) await x.release().catch(() => {});
      time.stop();
      if (closed) return;
      await h.drop();
    });

    const makeEngine = (options: Partial<EngineOptions<unknown>> = {}) => new IdempotencyEngine<unknown>({ store: h.store, ...options });
    const begin = async (engine: IdempotencyEngine<unknown>, key = 'k', fingerprint = FP) => {
      const result = await engine.begin({ scope: SCOPE, key, fingerprint });
      if (result.kind === 'execute') open.push(result.execution);
      return result;
    };
    /** Waits until the lease on `key` has run out and a begin takes it over. */
    const takeOver = async (engine: IdempotencyEngine<unknown>, key = 'k') =>
      executionOf(
        await eventually(
          () => begin(engine, key),
          (r) => r.kind !== 'in-progress',
        ),
      );
    const sideNotes = () => h.effects();
    /** A business effect inside the phase's transaction (see StoreHarness.effect); returns `note`. */
    const insertSide = (note: string) => async (tx: unknown) => {
      await h.effect(note)(tx);
      return note;
    };
    const record = (key = 'k') => h.store.get(SCOPE, key, 86_400_000);

    describe('begin', () => {
      it('executes a new key with a fresh positive token, not resumed', async () => {
        const x = executionOf(await begin(makeEngine()));
        assert.ok(Number.isSafeInteger(x.token) && x.token > 0, `a positive integer token, got ${x.token}`);
        assert.equal((await record())?.token, x.token, 'the execution holds the row token');
        assert.equal(x.resumed, false);
        assert.equal(x.resumedFrom, 'start');
        assert.equal(x.status, 'open');
        assert.equal(x.workStarted, false);
        assert.equal(x.scope, SCOPE);
        assert.equal(x.key, 'k');
      });

      it('answers in-progress to a second begin while the lease is valid, with retryAfterMs within the lease', async () => {
        const engine = makeEngine({ leaseMs: 5000 });
        executionOf(await begin(engine));
        const second = await begin(engine);
        assert.equal(second.kind, 'in-progress');
        const { retryAfterMs } = second as Extract<BeginResult, { kind: 'in-progress' }>;
        assert.ok(retryAfterMs > 0 && retryAfterMs <= 5000, `retryAfterMs ${retryAfterMs}`);
        assert.ok(retryAfterMs > 3000, `retryAfterMs ${retryAfterMs} reflects the remaining lease`);
      });

      it('answers mismatch to a different fingerprint, before in-progress and before replay', async () => {
        const engine = makeEngine();
        const x = executionOf(await begin(engine));
        const whileRunning = await begin(engine, 'k', OTHER_FP);
        assert.equal(whileRunning.kind, 'mismatch');
        assert.deepEqual(Array.from((whileRunning as Extract<BeginResult, { kind: 'mismatch' }>).record.fingerprint), Array.from(FP));

        await x.finish(response(201, [1, 2, 3]));
        assert.equal((await begin(engine, 'k', OTHER_FP)).kind, 'mismatch');
        const replay = await begin(engine);
        assert.equal(replay.kind, 'replay', 'the mismatch left the stored row untouched');
      });

      it('answers mismatch, not take-over, to a different fingerprint after the lease expired', async () => {
        const engine = makeEngine({ leaseMs: SHORT_LEASE_MS, heartbeatMs: 0 });
        const x = executionOf(await begin(engine));
        await eventually(
          () => record(),
          (r) => r?.leaseExpired === true,
        );
        assert.equal((await begin(engine, 'k', OTHER_FP)).kind, 'mismatch');
        assert.equal((await record())?.token, x.token, 'nothing was taken over');
        assert.equal((await record())?.leaseExpired, true, 'nor was the lease renewed');
      });

      it('replays a stored 402 with its exact bytes', async () => {
        const engine = makeEngine();
        const x = executionOf(await begin(engine));
        await x.finish(response(402, [0, 255, 10, 0]));
        const replay = await begin(engine);
        assert.equal(replay.kind, 'replay');
        const stored = (replay as Extract<BeginResult, { kind: 'replay' }>).response;
        assert.equal(stored.status, 402);
        assert.deepEqual(stored.headers, [['content-type', 'application/octet-stream']]);
        assert.deepEqual(Array.from(stored.body), [0, 255, 10, 0]);
      });

      it('rejects an invalid key, scope or fingerprint before touching the store', async () => {
        const engine = makeEngine();
        await assert.rejects(engine.begin({ scope: SCOPE, key: '', fingerprint: FP }), InvalidKeyError);
        await assert.rejects(engine.begin({ scope: SCOPE, key: 'x'.repeat(256), fingerprint: FP }), InvalidKeyError);
        await assert.rejects(engine.begin({ scope: '', key: 'k', fingerprint: FP }), InvalidScopeError);
        await assert.rejects(engine.begin({ scope: 's'.repeat(256), key: 'k', fingerprint: FP }), InvalidScopeError);
        await assert.rejects(engine.begin({ scope: SCOPE, key: 'k', fingerprint: new Uint8Array(31) }), TypeError);
        assert.equal(await h.count(), 0);
      });
    });

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
        const engine = makeEngine({ leaseMs: SHORT_LEASE_MS, heartbeatMs: 0, retentionMs: SHORT_LEASE_MS + 100 });
        const first = executionOf(await begin(engine));
        const before = first.derivedKey('psp_charge');
        await first.finish(response(201, [1]));
        assert.equal((await begin(engine)).kind, 'replay', 'within retention the key replays');
        const again = executionOf(
          await eventually(
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

    describe('a stale execution', () => {
      it('gets LeaseLostError from phase, call, finish and extendLease once another worker took over', async () => {
        const engine = makeEngine({ leaseMs: SHORT_LEASE_MS, heartbeatMs: 0 });
        const keys = ['phase', 'call', 'finish', 'extend'];
        const stale = await Promise.all(keys.map(async (key) => executionOf(await begin(engine, key))));
        const fresh = await Promise.all(keys.map((key) => takeOver(engine, key)));
        fresh.forEach((x, i) => assert.ok(x.token > stale[i]!.token, `${keys[i]}: takeover token ${x.token} must exceed ${stale[i]!.token}`));
        const [xPhase, xCall, xFinish, xExtend] = stale as [X, X, X, X];

        // phase: effects rolled back, signal aborted.
        let phaseRan = false;
        await assert.rejects(
          xPhase.phase('p', async (tx) => {
            phaseRan = true;
            return insertSide('stale-phase')(tx);
          }),
          (e: unknown) => e instanceof LeaseLostError && e.code === ErrorCode.LeaseLost,
        );
        assert.equal(phaseRan, true);
        assert.equal(xPhase.signal.aborted, true);
        assert.ok(xPhase.signal.reason instanceof LeaseLostError, 'xPhase.signal.reason instanceof LeaseLostError');
        assert.equal(xPhase.status, 'lost');

        // call: the call ran, its result is not recorded.
        await assert.rejects(
          xCall.call('psp', async () => 'ch'),
          LeaseLostError,
        );
        assert.equal(xCall.signal.aborted, true);

        // finish with effects: nothing stored, effects rolled back.
        await assert.rejects(
          xFinish.finish(async (tx) => {
            await insertSide('stale-finish')(tx);
            return response(200);
          }),
          LeaseLostError,
        );
        assert.equal(xFinish.signal.aborted, true);

        await assert.rejects(xExtend.extendLease(), LeaseLostError);
        assert.equal(xExtend.signal.aborted, true);

        assert.deepEqual(await sideNotes(), [], 'no stale effect survived');
        for (const [i, key] of keys.entries()) {
          const r = await record(key);
          assert.equal(r?.state, 'started');
          assert.equal(r?.token, fresh[i]!.token, 'the row holds the new owner token');
          assert.deepEqual(r?.phaseResults, {});
        }

        // Once lost, every method keeps failing without running its function.
        let ran = false;
        await assert.rejects(
          xPhase.phase('q', async () => (ran = true)),
          LeaseLostError,
        );
        await assert.rejects(
          xPhase.call('q', async () => (ran = true)),
          LeaseLostError,
        );
        await assert.rejects(xPhase.finish(response(200)), LeaseLostError);
        assert.equal(ran, false);

        // The new owners are unaffected.
        await fresh[2]!.finish(response(201, [7]));
        const replay = await begin(engine, 'finish');
        assert.equal(replay.kind, 'replay');
        assert.equal((replay as Extract<BeginResult, { kind: 'replay' }>).response.status, 201);
      });

      it('learns from its heartbeat that the lease was taken over, and aborts its signal', async () => {
        const engine = makeEngine({ leaseMs: 1000, heartbeatMs: 100 });
        const stale = executionOf(await begin(engine));
        // Force the lease out, as if the heartbeat had stalled, and let another worker take
        // over; repeat if a heartbeat slipped in between and renewed the lease.
        const other = makeEngine({ leaseMs: 1000, heartbeatMs: 0 });
        const taken = await eventually(
          async () => {
            await h.setLease(SCOPE, 'k', -1000);
            return begin(other);
          },
          (r) => r.kind === 'execute',
        );
        const newToken = executionOf(taken).token;
        assert.ok(newToken > stale.token, `takeover token ${newToken} must exceed ${stale.token}`);
        await eventually(
          async () => stale.signal.aborted,
          (aborted) => aborted,
          2000,
        );
        assert.ok(stale.signal.reason instanceof LeaseLostError, 'stale.signal.reason instanceof LeaseLostError');
        assert.equal(stale.status, 'lost');
        assert.equal((await record())?.token, newToken);
      });
    });

    describe('heartbeat', () => {
      it('keeps a lease alive past leaseMs', async () => {
        const engine = makeEngine({ leaseMs: 300, heartbeatMs: 80 });
        const x = executionOf(await begin(engine));
        await sleep(700);
        const concurrent = await begin(engine);
        assert.equal(concurrent.kind, 'in-progress');
        assert.equal((await record())?.leaseExpired, false);
        await x.finish(response(200));
      });

      it('stops extending after maxExecutionMs, so another worker can take over', async () => {
        const engine = makeEngine({ leaseMs: 300, heartbeatMs: 60, maxExecutionMs: 450 });
        const started = Date.now();
        const x = executionOf(await begin(engine));
        await sleep(400);
        assert.equal((await begin(engine)).kind, 'in-progress', 'the heartbeat ran past the first lease');
        const y = await takeOver(engine);
        const elapsed = Date.now() - started;
        assert.ok(y.token > x.token, `takeover token ${y.token} must exceed ${x.token}`);
        assert.ok(elapsed >= 450, `taken over after ${elapsed} ms, before maxExecutionMs`);
        await assert.rejects(
          x.phase('late', async () => 1),
          LeaseLostError,
        );
      });

      it('stops when the execution is released', async () => {
        const engine = makeEngine({ leaseMs: 300, heartbeatMs: 50 });
        const x = executionOf(await begin(engine));
        await x.phase('a', async () => 1);
        await x.release();
        await sleep(150);
        const r = await record();
        assert.equal(r?.leaseExpired, true, 'no heartbeat renewed the released lease');
      });
    });

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
        assert.equal(await y.phase('a', async () => ((ran = true), 'again')), 'a');
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
        /** The row without its (ticking) lease and retention left. */
        const snapshot = async () => {
          const r = await record();
          return r && { ...r, leaseRemainingMs: undefined, retentionRemainingMs: undefined };
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

    describe('events', () => {
      it('reports claimed, in-progress, mismatch, phases, release, taken-over, skip, finished and replayed', async () => {
        const events: IdempotencyEvent[] = [];
        const engine = makeEngine({ onEvent: (e) => events.push(e) });
        const x = executionOf(await begin(engine));
        await begin(engine);
        await begin(engine, 'k', OTHER_FP);
        await x.phase('a', async () => 1);
        await x.release();
        const y = executionOf(await begin(engine));
        await y.phase('a', async () => 2);
        await y.finish(response(200));
        await begin(engine);

        assert.ok(y.token > x.token, `takeover token ${y.token} must exceed ${x.token}`);
        assert.deepEqual(
          events.map((e) => [e.type, e.token, e.phase]),
          [
            ['claimed', x.token, undefined],
            ['in-progress', undefined, undefined],
            ['mismatch', undefined, undefined],
            ['phase-committed', x.token, 'a'],
            ['released', x.token, undefined],
            ['taken-over', y.token, undefined],
            ['phase-skipped', y.token, 'a'],
            ['finished', y.token, undefined],
            ['replayed', undefined, undefined],
          ],
        );
        assert.ok(
          events.every((e) => e.scope === SCOPE && e.key === 'k'),
          'every event names the scope and key',
        );
      });

      it('reports discarded and lease-lost', async () => {
        const events: IdempotencyEvent[] = [];
        const engine = makeEngine({ leaseMs: SHORT_LEASE_MS, heartbeatMs: 0, onEvent: (e) => events.push(e) });
        const x = executionOf(await begin(engine, 'd'));
        await x.discard();
        const stale = executionOf(await begin(engine, 'l'));
        await takeOver(engine, 'l');
        await assert.rejects(
          stale.phase('a', async () => 1),
          LeaseLostError,
        );
        const types = events.map((e) => e.type).filter((t) => t !== 'in-progress');
        assert.deepEqual(types, ['claimed', 'discarded', 'claimed', 'taken-over', 'lease-lost']);
      });

      it('ignores an observer that throws', async () => {
        const engine = makeEngine({
          onEvent: () => {
            throw new Error('observer failed');
          },
        });
        const x = executionOf(await begin(engine));
        assert.equal(await x.phase('a', async () => 1), 1);
        await x.finish(response(200));
        assert.equal((await begin(engine)).kind, 'replay');
      });
    });

    describe('phase names', () => {
      it('throws InvalidPhaseError for invalid or reserved names without running the function', async () => {
        const x = executionOf(await begin(makeEngine()));
        let ran = false;
        const fn = async () => ((ran = true), 1);
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

    // Last: this test closes the shared client. A memory store cannot go away.
    describe('store unavailable', { skip: !factory.capabilities.sql && 'an in-process store has no connection to lose' }, () => {
      it('throws StoreUnavailableError with the driver error as cause when the client is closed', async () => {
        await h.drop();
        await conn.close();
        closed = true;
        const events: IdempotencyEvent[] = [];
        const engine = new IdempotencyEngine({ store: h.store, onEvent: (e) => events.push(e) });
        await assert.rejects(engine.begin({ scope: SCOPE, key: 'k', fingerprint: FP }), (error: unknown) => {
          assert.ok(error instanceof StoreUnavailableError, 'error instanceof StoreUnavailableError');
          assert.equal(error.code, ErrorCode.StoreUnavailable);
          assert.ok(error.cause instanceof Error, 'cause carries the driver error');
          return true;
        });
        assert.deepEqual(
          events.map((e) => e.type),
          ['store-unavailable'],
        );
      });
    });
  });
}

describe('IdempotencyEngine options', () => {
  // Option checks happen in the constructor; this store is never called.
  const store = {
    claim: async () => {
      throw new Error('not used');
    },
  } as unknown as IdempotencyStore;

  it('requires a store', () => {
    assert.throws(() => new IdempotencyEngine(undefined as never), InvalidOptionError);
    assert.throws(() => new IdempotencyEngine({} as never), InvalidOptionError);
    assert.throws(() => new IdempotencyEngine({ store: {} as never }), InvalidOptionError);
  });

  it('rejects out-of-range durations', () => {
    const bad: Array<Partial<EngineOptions>> = [
      { leaseMs: 0 },
      { leaseMs: -1 },
      { leaseMs: Number.NaN },
      { leaseMs: Number.POSITIVE_INFINITY },
      { retentionMs: 0 },
      { leaseMs: 1000, retentionMs: 1000 },
      { leaseMs: 1000, retentionMs: 999 },
      { leaseMs: 1000, heartbeatMs: 1000 },
      { leaseMs: 1000, heartbeatMs: 2000 },
      { heartbeatMs: -1 },
      { heartbeatMs: Number.NaN },
      { maxExecutionMs: 0 },
      { maxExecutionMs: -5 },
    ];
    for (const options of bad) {
      assert.throws(() => new IdempotencyEngine({ store, ...options }), InvalidOptionError, JSON.stringify(options));
    }
  });

  it('with a heartbeat, requires retentionMs > maxExecutionMs + leaseMs (a live lease never outlasts retention)', () => {
    const invalid = (options: Partial<EngineOptions>) =>
      assert.throws(
        () => new IdempotencyEngine({ store, ...options }),
        (error: unknown) => error instanceof InvalidOptionError && /retentionMs/.test(error.message) && /maxExecutionMs/.test(error.message),
        JSON.stringify(options),
      );
    invalid({ leaseMs: 1000, maxExecutionMs: 10_000, retentionMs: 11_000 });
    invalid({ leaseMs: 1000, maxExecutionMs: 10_000, retentionMs: 10_999 });
    invalid({ leaseMs: 1000, retentionMs: 11_000 }); // default maxExecutionMs: 10 × leaseMs
    invalid({ leaseMs: 1000, heartbeatMs: 100, maxExecutionMs: 5000, retentionMs: 6000 });
    invalid({ leaseMs: 60_000, retentionMs: 600_000 }); // all defaults but retention: 10 min < 11 min
    assert.equal(new IdempotencyEngine({ store, leaseMs: 1000, maxExecutionMs: 10_000, retentionMs: 11_001 }).retentionMs, 11_001);
    assert.equal(new IdempotencyEngine({ store, leaseMs: 1000, retentionMs: 11_001 }).maxExecutionMs, 10_000);
    // Without a heartbeat a lease never outlives its last write: retention > lease is enough.
    assert.equal(new IdempotencyEngine({ store, leaseMs: 1000, heartbeatMs: 0, retentionMs: 1001 }).retentionMs, 1001);
    assert.equal(new IdempotencyEngine({ store, leaseMs: 1000, heartbeatMs: 0, maxExecutionMs: 99_000, retentionMs: 2000 }).heartbeatMs, 0);
  });

  it('accepts heartbeatMs 0 and derives defaults', () => {
    assert.equal(new IdempotencyEngine({ store, heartbeatMs: 0 }).heartbeatMs, 0);
    const engine = new IdempotencyEngine({ store, leaseMs: 900 });
    assert.equal(engine.leaseMs, 900);
    assert.equal(engine.heartbeatMs, 300);
    assert.equal(engine.maxExecutionMs, 9000);
    assert.equal(engine.retentionMs, 86_400_000);
  });
});

describe('IdempotencyEngine with an unreachable database', () => {
  const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/test', connectionTimeoutMillis: 2000 });
  after(async () => {
    await pool.end();
  });

  it('fails closed: begin throws StoreUnavailableError with the connection error as cause', async () => {
    const engine = new IdempotencyEngine({ store: new PostgresStore({ client: pool }) });
    await assert.rejects(engine.begin({ scope: SCOPE, key: 'k', fingerprint: FP }), (error: unknown) => {
      assert.ok(error instanceof StoreUnavailableError, 'error instanceof StoreUnavailableError');
      assert.equal(error.code, ErrorCode.StoreUnavailable);
      assert.equal((error.cause as { code?: string }).code, 'ECONNREFUSED');
      return true;
    });
  });
});
