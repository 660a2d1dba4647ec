/**
 * The next-step signal (protocol.md H41): every problem idem answers says what the client may do
 * next (`operation_state`, `safe_new_key`, and the `Idem-Operation-State` header), and every
 * replay carries the header. `not-applied`, the one state that makes a new key safe, is said only
 * when no declared effect of the key can exist. Over real sockets (Hono) on PGlite and PostgreSQL.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { HttpIdempotency, type IdempotencyOptions } from '../src/http/idempotency.js';
import { InvalidOptionError } from '../src/core/errors.js';
import { MemoryStore } from '../src/memory/index.js';
import type { Queryable } from '../src/postgres/client.js';
import { type AdapterHarness, hono, type Route, webCore } from './helpers/adapter-harness.js';
import { engines, freshStore, useEngine } from './helpers/engines.js';
import { IdempotentClient } from '../src/client/index.js';
import { assertProblem, deferred, requestInit, unreachableStore } from './helpers/http.js';

type Signal = { state: string | null; member: unknown; safe: unknown };

/** The signal of a problem: the header and the two members, which must agree. */
async function problemSignal(response: Response, status: number, kind: string): Promise<Signal> {
  const state = response.headers.get('idem-operation-state');
  const body = await assertProblem(response, status, kind);
  assert.equal(body.operation_state, state, 'the member and the header say the same');
  return { state, member: body.operation_state, safe: body.safe_new_key };
}

const notApplied = { state: 'not-applied', member: 'not-applied', safe: true };
const maybeApplied = { state: 'maybe-applied', member: 'maybe-applied', safe: false };

for (const engine of engines) {
  describe(`the next-step signal on ${engine.name} (protocol.md H41)`, () => {
    const db = useEngine(engine);

    async function serve(route: Route, options: Partial<IdempotencyOptions<Queryable>> = {}, harness: AdapterHarness = hono) {
      const { store, drop } = await freshStore(db.client());
      db.cleanup(drop);
      const app = harness.build({ store, onHandlerError: () => undefined, ...options }, route, db.cleanup);
      const url = await app.serve();
      return (key: string | undefined, json: unknown = { amount: 1 }) => fetch(`${url}/v1/charges`, requestInit({ key, json }));
    }

    it('refusals before the key is claimed: not applied, a new key is safe', async () => {
      // The web core reads the body itself, so it holds the body limit (protocol.md H27).
      const send = await serve(() => ({ status: 201, body: 'ok' }), { maxBodyBytes: 64, required: true }, webCore);
      assert.deepEqual(await problemSignal(await send(undefined), 400, 'idempotency-key-missing'), notApplied);
      assert.deepEqual(await problemSignal(await send('"abc'), 400, 'idempotency-key-invalid'), notApplied);
      assert.deepEqual(await problemSignal(await send('big-1', { pad: 'x'.repeat(200) }), 413, 'request-too-large'), notApplied);
    });

    it('a replay says completed; the same key with another body is a mismatch, and no new key is safe', async () => {
      const send = await serve(() => ({ status: 201, headers: { 'content-type': 'application/json' }, body: '{"id":"ch_1"}' }));
      const first = await send('k-1');
      assert.equal(first.status, 201);
      assert.equal(first.headers.get('idem-operation-state'), null, 'a first answer is the handler’s own');
      const replay = await send('k-1');
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(replay.headers.get('idem-operation-state'), 'completed');
      assert.deepEqual(await problemSignal(await send('k-1', { amount: 2 }), 422, 'idempotency-key-reused'), {
        state: 'key-mismatch',
        member: 'key-mismatch',
        safe: false,
      });
    });

    it('in progress: maybe applied, the same key only', async () => {
      const gate = deferred();
      const entered = deferred();
      const send = await serve(async () => {
        entered.resolve();
        await gate.promise;
        return { status: 201, body: 'ok' };
      });
      const first = send('busy-1');
      await entered.promise;
      assert.deepEqual(await problemSignal(await send('busy-1'), 409, 'request-in-progress'), maybeApplied);
      gate.resolve();
      assert.equal((await first).status, 201);
    });

    it('inProgressStatus: 423: the same in-progress problem under 423 Locked, for suites that expect it (protocol.md H13)', async () => {
      const gate = deferred();
      const entered = deferred();
      const send = await serve(
        async () => {
          entered.resolve();
          await gate.promise;
          return { status: 201, body: 'ok' };
        },
        { inProgressStatus: 423 },
      );
      const first = send('busy-423');
      await entered.promise;
      const busy = await send('busy-423');
      assert.ok(busy.headers.get('retry-after'), 'Retry-After as with 409');
      assert.deepEqual(await problemSignal(busy, 423, 'request-in-progress'), maybeApplied);
      gate.resolve();
      assert.equal((await first).status, 201);
      assert.equal((await send('busy-423')).headers.get('idempotent-replayed'), 'true');
      assert.throws(
        () => new HttpIdempotency({ store: new MemoryStore(), inProgressStatus: 410 as never }),
        (e: unknown) => e instanceof InvalidOptionError && /inProgressStatus must be 409 or 423/.test(e.message),
      );
    });

    it('a first attempt that throws before any phase or derived key: not applied; after a phase, a derived key or a takeover: maybe applied', async () => {
      const send = await serve(async (req, ctx) => {
        const body = await req.json<{ step: string }>();
        if (body.step === 'phase') await ctx!.phase('noted', async () => 'n');
        if (body.step === 'derived') ctx!.execution.derivedKey('psp');
        throw new Error(`boom after ${body.step}`);
      });
      assert.deepEqual(await problemSignal(await send('t-none', { step: 'none' }), 500, 'request-failed-retry'), notApplied);
      assert.deepEqual(await problemSignal(await send('t-phase', { step: 'phase' }), 500, 'request-failed-retry'), maybeApplied);
      assert.deepEqual(await problemSignal(await send('t-derived', { step: 'derived' }), 500, 'request-failed-retry'), maybeApplied);
      // The retry takes the released key over: the first attempt's calls are not known to it.
      assert.deepEqual(await problemSignal(await send('t-none', { step: 'none' }), 500, 'request-failed-retry'), maybeApplied);
    });

    it('a permanent failure on the only attempt is stored with its signal and replayed with it', async () => {
      const send = await serve(
        () => {
          throw new Error('always');
        },
        { maxAttempts: 1 },
      );
      // With maxAttempts 1 the first failure is the last: stored as request-failed-permanently.
      const first = await send('p-1');
      assert.deepEqual(await problemSignal(first, 500, 'request-failed-permanently'), notApplied);
      const replay = await send('p-1');
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await problemSignal(replay, 500, 'request-failed-permanently'), notApplied);
    });

    it('a response too large to keep: applied, result unavailable; its replays say so too', async () => {
      const send = await serve(() => ({ status: 201, body: 'y'.repeat(4096) }), { maxResponseBytes: 1024 });
      const first = await send('big-r');
      assert.equal(first.status, 201, 'the first client still gets its response');
      await first.arrayBuffer();
      const replay = await send('big-r');
      assert.deepEqual(await problemSignal(replay, 500, 'response-too-large-to-keep'), {
        state: 'applied-result-unavailable',
        member: 'applied-result-unavailable',
        safe: false,
      });
    });
  });
}

describe('the next-step signal when the store is down (protocol.md H41)', () => {
  it('503: maybe applied, since the store cannot say whether an earlier request with the key ran', async () => {
    const down = unreachableStore();
    const cleanups: Array<() => Promise<void>> = [];
    try {
      const app = hono.build(
        { store: down.store },
        () => ({ status: 201, body: 'ok' }),
        (fn) => cleanups.push(fn),
      );
      const res = await app.send('/v1/charges', requestInit({ key: 'down-1', json: {} }));
      assert.deepEqual(await problemSignal(res, 503, 'idempotency-store-unavailable'), maybeApplied);
    } finally {
      for (const fn of cleanups) await fn();
      await down.close();
    }
  });
});

describe('idem/client reads the next-step signal (protocol.md H41)', () => {
  const db = useEngine(engines[0]!);

  async function serve(route: Route) {
    const { store, drop } = await freshStore(db.client());
    db.cleanup(drop);
    const app = hono.build({ store, onHandlerError: () => undefined, maxAttempts: 1 }, route, db.cleanup);
    return `${await app.serve()}/v1/charges`;
  }
  const client = (newKeyWhenSafe: boolean) => new IdempotentClient({ baseDelayMs: 1, maxDelayMs: 5, newKeyWhenSafe });
  const charge = { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"amount":1}' };

  it('a key spent on a failure that applied nothing: returned with safeNewKey, and renewed only with newKeyWhenSafe', async () => {
    let runs = 0;
    const url = await serve(() => {
      runs++;
      if (runs === 1 || runs === 2) throw new Error('the first try of each client fails');
      return { status: 201, body: 'charged' };
    });
    // Without the option: the stored failure comes back, marked safe for a new key.
    const kept = await client(false).fetch(url, charge);
    assert.equal(kept.status, 500);
    assert.equal(kept.replayed, true);
    assert.equal(kept.operationState, 'not-applied');
    assert.equal(kept.safeNewKey, true);
    assert.equal(runs, 1);
    // With it: the client mints a new key and the request goes through under it.
    const renewed = await client(true).fetch(url, charge);
    assert.equal(renewed.status, 201);
    assert.equal(await renewed.text(), 'charged');
    assert.equal(renewed.operationState, undefined, 'the handler’s own answer');
    assert.equal(runs, 3);
  });

  it('a key spent after a committed phase is never renewed: the failure is returned, not safe for a new key', async () => {
    let phases = 0;
    const url = await serve(async (_req, ctx) => {
      await ctx!.phase('charged', async () => ++phases);
      throw new Error('after the charge');
    });
    const res = await client(true).fetch(url, charge);
    assert.equal(res.status, 500);
    assert.equal(res.operationState, 'maybe-applied');
    assert.equal(res.safeNewKey, false);
    assert.equal(phases, 1, 'the charge ran once: no new key was minted');
  });
});
