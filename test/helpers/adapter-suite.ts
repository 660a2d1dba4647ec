/**
 * The adapter contract suite: every HTTP behaviour idem promises, stated once and run against
 * every adapter harness (test/helpers/adapter-harness.ts) on every engine (test/adapters.test.ts),
 * as the store contract suite is run against every store. H counts how many times the route
 * ran; every behaviour is checked against the key table as well. What only one framework can
 * show (Hono's HTTPException, Express's raw socket and writeHead) lives in its own test file.
 */
import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import type { IdempotencyOptions } from '../../src/http/idempotency.js';
import type { Queryable } from '../../src/postgres/client.js';
import type { IdempotencyStore } from '../../src/store/types.js';
import type { AdapterHarness, Ctx, Reply, Route } from './adapter-harness.js';
import { assertProblem, bytes, deferred, hex, INVALID_KEYS, poll, requestInit, type Send, unreachableStore } from './http.js';
import type { StoreBackend, StoreHarness } from './stores.js';
import { eventually, type TestTime } from './wait.js';

/** For tests that hold a route on a gate: a broken adapter fails them instead of hanging the run. */
const GATED = { timeout: 15_000 };

const jsonReply = (status: number, value: unknown, headers: Record<string, string> = {}): Reply => ({
  status,
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(value),
});

/** 201 JSON with allow-listed headers (content-type, location, etag) and never-replayed ones (Set-Cookie, x-request-id). */
const created: Route = async (req) => {
  const text = await req.text();
  return {
    status: 201,
    headers: { 'content-type': 'application/json', location: '/v1/charges/ch_1', etag: '"v1"', 'x-request-id': `req-${Math.random()}` },
    setCookie: ['session=s3cr3t; HttpOnly'],
    body: JSON.stringify({ id: 'ch_1', received: text.length, at: Math.random() }),
  };
};

/** What the suite's parts share: the harness, the store backend, cleanups and the clock. */
export interface SuiteEnv {
  harness: AdapterHarness;
  backend(): StoreBackend;
  cleanup(fn: () => Promise<void>): void;
  /** Real time on a database; the memory store's clock (mocked `Date`) moves without waiting. */
  time: TestTime;
}

/**
 * Registers the contract suite for `env.harness` on `env.backend()` (connected in a `before` of
 * the caller); `env.cleanup` collects what to drop or close after the suite.
 */
export function adapterContract(env: SuiteEnv): void {
  const { harness, cleanup, time } = env;
  /** The store of the test running now (tests of a suite run one at a time). */
  let current: StoreHarness;
  /** A business effect in the phase's transaction, as a route would write one. */
  const touch = (tx: unknown) => current.effect('touch')(tx);
  beforeEach(() => time.start());
  afterEach(() => time.stop());

  /** An app on a fresh store, with `counter.H` counting route runs and `errors` what onHandlerError got. */
  async function setup(route: Route, options: Partial<IdempotencyOptions<Queryable>> = {}) {
    const h = await env.backend().fresh();
    cleanup(() => h.drop());
    current = h;
    const errors: unknown[] = [];
    const counter = { H: 0 };
    // The route's tx is the store's own; routes here only hand it to the harness's effects.
    const store = h.store as IdempotencyStore<Queryable>;
    const app = harness.build({ store, onHandlerError: (e) => errors.push(e), ...options }, (req, ctx) => {
      counter.H++;
      return route(req, ctx);
    }, cleanup);
    const send = (path: string, s: Send = {}) => app.send(path, requestInit(s));
    return { app, h, counter, errors, send, rows: () => h.rows(), count: () => h.count(), dump: () => h.dump() };
  }

  describe('which requests are protected', () => {
    it('GET, PUT and DELETE with a key pass through unprotected: the handler runs every time, no row is written', async () => {
      const seen: Ctx[] = [];
      const { send, counter, count } = await setup((_req, ctx) => {
        seen.push(ctx);
        return { status: 200, body: 'ok' };
      }, { required: true });
      for (const method of ['GET', 'PUT', 'DELETE', 'GET', 'PUT', 'DELETE']) {
        const res = await send('/v1/things/1', { method, key: 'same-key', body: method === 'PUT' ? 'x' : undefined });
        assert.equal(res.status, 200, method);
        assert.equal(res.headers.get('idempotent-replayed'), null);
        await res.arrayBuffer();
      }
      assert.equal(counter.H, 6);
      assert.deepEqual(seen, Array(6).fill(undefined));
      assert.equal(await count(), 0);
    });

    it('a POST without a key passes through unprotected when the key is not required', async () => {
      let ctxSeen: Ctx | 'unset' = 'unset';
      const { send, counter, count } = await setup(async (req, ctx) => {
        ctxSeen = ctx;
        return { status: 201, body: await req.text() };
      });
      const a = await send('/v1/charges', { json: { amount: 1 } });
      const b = await send('/v1/charges', { json: { amount: 1 } });
      assert.equal(a.status, 201);
      assert.equal(await a.text(), '{"amount":1}', 'the handler can still read the body');
      assert.equal(b.status, 201);
      assert.equal(b.headers.get('idempotent-replayed'), null);
      await b.arrayBuffer();
      assert.equal(ctxSeen, undefined);
      assert.equal(counter.H, 2);
      assert.equal(await count(), 0);
    });

    it('required: true — a POST (or PATCH) without a key gets a 400 idempotency-key-missing problem, H=0, nothing stored', async () => {
      const { send, counter, count } = await setup(created, { required: true });
      const problem = await assertProblem(await send('/v1/charges', { json: { amount: 1 } }), 400, 'idempotency-key-missing');
      assert.match(String(problem.detail), /Idempotency-Key/);
      await assertProblem(await send('/v1/charges/1', { method: 'PATCH', json: { amount: 1 } }), 400, 'idempotency-key-missing');
      assert.equal(counter.H, 0);
      assert.equal(await count(), 0);
    });
  });

  describe('the key', () => {
    // fetch refuses a header value with 0x01, so that key is only sent in process.
    const keys = harness.socket ? INVALID_KEYS : [...INVALID_KEYS, ['a key with a control character (0x01)', 'a\x01b'] as [string, string]];
    for (const [name, value] of keys) {
      it(`${name} gets a 400 idempotency-key-invalid problem, H=0, no row`, async () => {
        const { send, counter, count } = await setup(created);
        await assertProblem(await send('/v1/charges', { key: value, json: { amount: 1 } }), 400, 'idempotency-key-invalid');
        assert.equal(counter.H, 0);
        assert.equal(await count(), 0);
      });
    }

    it('a 255-character key is accepted and stored whole (never truncated)', async () => {
      const { send, counter, rows } = await setup(created);
      const key = 'k'.repeat(254) + 'z';
      const first = await send('/v1/charges', { key, json: {} });
      assert.equal(first.status, 201);
      await first.arrayBuffer();
      const [row] = await rows();
      assert.equal(row!.key, key);
      const replay = await send('/v1/charges', { key, json: {} });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await replay.arrayBuffer();
      assert.equal(counter.H, 1);
    });

    it('the sf-string "k1" and the bare token k1 are the same key: the second is a replay', async () => {
      const { send, counter, rows } = await setup(created);
      const first = await send('/v1/charges', { key: '"k1"', json: { amount: 5 } });
      assert.equal(first.status, 201);
      const firstBytes = await bytes(first);
      const second = await send('/v1/charges', { key: 'k1', json: { amount: 5 } });
      assert.equal(second.status, 201);
      assert.equal(second.headers.get('idempotent-replayed'), 'true');
      assert.equal(hex(await bytes(second)), hex(firstBytes));
      assert.equal(counter.H, 1);
      assert.deepEqual((await rows()).map((r) => r.key), ['k1']);
    });
  });

  describe('first execution and replay', () => {
    it('a retry gets the same status, byte-identical body, allow-listed headers and Idempotent-Replayed: true', async () => {
      const { send, counter, rows } = await setup(created);
      const first = await send('/v1/charges', { key: 'replay-1', json: { amount: 100 } });
      assert.equal(first.status, 201);
      assert.equal(first.headers.get('idempotent-replayed'), null);
      const firstBody = await bytes(first);
      assert.equal(JSON.parse(Buffer.from(firstBody).toString()).received, '{"amount":100}'.length, 'the handler read the body');
      const [row] = await rows();
      assert.equal(row!.state, 'done');
      assert.equal(row!.response_status, 201);
      assert.equal(row!.response_body, hex(firstBody));
      for (let i = 0; i < 2; i++) {
        const replay = await send('/v1/charges', { key: 'replay-1', json: { amount: 100 } });
        assert.equal(replay.status, 201);
        assert.equal(hex(await bytes(replay)), hex(firstBody));
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        for (const name of ['content-type', 'location', 'etag']) {
          assert.ok(first.headers.get(name), `first ${name}`);
          assert.equal(replay.headers.get(name), first.headers.get(name), name);
        }
      }
      assert.equal(counter.H, 1);
    });

    it('Set-Cookie and x-request-id are in the first response but never in the replay (nor stored)', async () => {
      const { send, rows } = await setup(created);
      const first = await send('/v1/charges', { key: 'cookie-1', json: {} });
      assert.deepEqual(first.headers.getSetCookie(), ['session=s3cr3t; HttpOnly']);
      assert.match(first.headers.get('x-request-id') ?? '', /^req-/);
      await first.arrayBuffer();
      const replay = await send('/v1/charges', { key: 'cookie-1', json: {} });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(replay.headers.getSetCookie(), []);
      assert.equal(replay.headers.get('x-request-id'), null);
      await replay.arrayBuffer();
      assert.doesNotMatch(JSON.stringify((await rows())[0]!.response_headers), /s3cr3t|set-cookie|x-request-id/i);
    });

    it('a binary body with 0x00 and 0xff bytes round-trips exactly, request and response', async () => {
      const payload = new Uint8Array([0x00, 0xff, 0x00, 0x7f, 0x80, 0xfe, 0x0d, 0x0a, 0x00]);
      const received: string[] = [];
      const { send, counter } = await setup(async (req) => {
        const got = await req.bytes();
        received.push(hex(got));
        return { status: 201, headers: { 'content-type': 'application/octet-stream' }, body: new Uint8Array([0xff, ...got, 0x00]) };
      });
      const opts = { key: 'bin-1', body: payload, headers: { 'content-type': 'application/octet-stream' } };
      const first = await send('/v1/blobs', opts);
      assert.equal(first.status, 201);
      const firstBytes = await bytes(first);
      assert.deepEqual(received, [hex(payload)], 'the handler receives the exact request bytes');
      assert.equal(hex(firstBytes), 'ff' + hex(payload) + '00');
      const replay = await send('/v1/blobs', opts);
      assert.equal(replay.status, 201);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(replay.headers.get('content-type'), 'application/octet-stream');
      assert.equal(hex(await bytes(replay)), hex(firstBytes));
      assert.equal(counter.H, 1);
    });

    it('an empty 204 round-trips exactly', async () => {
      const { send, counter, rows } = await setup(() => ({ status: 204, headers: { etag: '"e204"' } }));
      const first = await send('/v1/things/1/archive', { key: 'nc-1' });
      assert.equal(first.status, 204);
      assert.equal((await bytes(first)).length, 0);
      const replay = await send('/v1/things/1/archive', { key: 'nc-1' });
      assert.equal(replay.status, 204);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(replay.headers.get('etag'), '"e204"');
      assert.equal(replay.body, null);
      assert.equal(counter.H, 1);
      assert.equal((await rows())[0]!.response_body, '');
    });

    for (const status of [402, 500]) {
      it(`a returned ${status} is stored and replayed (H=1)`, async () => {
        const { send, counter, rows } = await setup(() => jsonReply(status, { error: { code: status === 402 ? 'card_declined' : 'oops' } }));
        const first = await send('/v1/charges', { key: `s-${status}`, json: { amount: 1 } });
        assert.equal(first.status, status);
        const firstBody = await first.text();
        const replay = await send('/v1/charges', { key: `s-${status}`, json: { amount: 1 } });
        assert.equal(replay.status, status);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.text(), firstBody);
        assert.equal(counter.H, 1);
        assert.equal((await rows())[0]!.response_status, status);
      });
    }
  });

  describe('same key, different request', () => {
    it('reordered JSON keys in the retry are the same request: replay (H=1)', async () => {
      const { send, counter } = await setup(created);
      const json = { 'content-type': 'application/json' };
      const first = await send('/v1/charges', { key: 'order-1', body: '{"amount":100,"currency":"eur","meta":{"a":1,"b":2}}', headers: json });
      assert.equal(first.status, 201);
      const firstText = await first.text();
      const retry = await send('/v1/charges', { key: 'order-1', body: '{ "meta": {"b":2, "a":1.0}, "currency":"eur", "amount":100 }', headers: json });
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get('idempotent-replayed'), 'true');
      assert.equal(await retry.text(), firstText);
      assert.equal(counter.H, 1);
    });

    const variants: Array<[string, [string, Send], [string, Send]]> = [
      ['a different body', ['/v1/charges', { json: { amount: 100 } }], ['/v1/charges', { json: { amount: 200 } }]],
      ['a different path', ['/v1/charges', { json: { amount: 100 } }], ['/v1/refunds', { json: { amount: 100 } }]],
      ['a different query', ['/v1/charges?expand=customer', { json: { amount: 100 } }], ['/v1/charges?expand=invoice', { json: { amount: 100 } }]],
      ['a different method (PATCH vs POST)', ['/v1/charges/ch_1', { json: { amount: 100 } }], ['/v1/charges/ch_1', { method: 'PATCH', json: { amount: 100 } }]],
    ];
    for (const [name, [path1, send1], [path2, send2]] of variants) {
      it(`${name} with the same key gets a 422 idempotency-key-reused problem; the row is untouched and the original still replays`, async () => {
        const { send, counter, rows } = await setup(created);
        const first = await send(path1, { ...send1, key: 'reuse-1' });
        assert.equal(first.status, 201);
        const firstBody = await first.text();
        const before = await rows();
        await assertProblem(await send(path2, { ...send2, key: 'reuse-1' }), 422, 'idempotency-key-reused');
        assert.deepEqual(await rows(), before, 'the stored row is untouched');
        const replay = await send(path1, { ...send1, key: 'reuse-1' });
        assert.equal(replay.status, 201);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.text(), firstBody);
        assert.equal(counter.H, 1);
      });
    }

    it('mismatchStatus: 409 answers a reused key with 409', async () => {
      const { send, counter } = await setup(created, { mismatchStatus: 409 });
      const first = await send('/v1/charges', { key: 'm409', json: { amount: 1 } });
      assert.equal(first.status, 201);
      await first.arrayBuffer();
      await assertProblem(await send('/v1/charges', { key: 'm409', json: { amount: 2 } }), 409, 'idempotency-key-reused');
      assert.equal(counter.H, 1);
    });
  });

  describe('while the first request is running', () => {
    it('a different body gets 422 (not 409); the same request gets 409 request-in-progress with Retry-After in [1, ceil(lease/1000)]', GATED, async () => {
      const leaseMs = 4000;
      const entered = deferred();
      const gate = deferred();
      const { send, counter, count } = await setup(async (req, ctx) => {
        entered.resolve();
        await gate.promise;
        return created(req, ctx);
      }, { leaseMs });
      const first = send('/v1/charges', { key: 'busy-1', json: { amount: 1 } });
      await entered.promise;
      await assertProblem(await send('/v1/charges', { key: 'busy-1', json: { amount: 2 } }), 422, 'idempotency-key-reused');
      const busy = await send('/v1/charges', { key: 'busy-1', json: { amount: 1 } });
      const retryAfter = busy.headers.get('retry-after') ?? '';
      await assertProblem(busy, 409, 'request-in-progress');
      assert.match(retryAfter, /^\d+$/);
      assert.ok(Number(retryAfter) >= 1 && Number(retryAfter) <= Math.ceil(leaseMs / 1000), `Retry-After ${retryAfter}`);
      gate.resolve();
      const done = await first;
      assert.equal(done.status, 201);
      await done.arrayBuffer();
      const replay = await send('/v1/charges', { key: 'busy-1', json: { amount: 1 } });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await replay.arrayBuffer();
      assert.equal(counter.H, 1);
      assert.equal(await count(), 1);
    });

    it('50 parallel identical requests over a real HTTP server: H=1, one row, every answer a 201 (original or replay) or a 409', GATED, async () => {
      const { app, counter, count } = await setup(async (req, ctx) => {
        const body = await req.json();
        const charge = await ctx!.phase('charge', async (tx) => {
          await touch(tx);
          return { id: 'ch_parallel', body };
        });
        await new Promise((r) => setTimeout(r, 150));
        return jsonReply(201, charge);
      });
      const url = (await app.serve()) + '/v1/charges';
      const responses = await Promise.all(Array.from({ length: 50 }, () => fetch(url, requestInit({ key: 'parallel-1', json: { amount: 42 } }))));
      const results = await Promise.all(
        responses.map(async (r) => ({ status: r.status, replayed: r.headers.get('idempotent-replayed'), type: r.headers.get('content-type'), text: await r.text() })),
      );
      const statuses = new Set(results.map((r) => r.status));
      assert.ok([...statuses].every((s) => s === 201 || s === 409), `statuses: ${[...statuses].join(', ')}`);
      const ok = results.filter((r) => r.status === 201);
      assert.equal(ok.filter((r) => r.replayed !== 'true').length, 1, 'exactly one original 201');
      assert.equal(new Set(ok.map((r) => r.text)).size, 1, 'every 201 carries the same body');
      for (const r of results.filter((x) => x.status === 409)) {
        assert.equal(r.type, 'application/problem+json');
        assert.equal(JSON.parse(r.text).type, 'urn:idem:problem:request-in-progress');
      }
      assert.equal(counter.H, 1);
      assert.equal(await count(), 1);
    });
  });

  describe('client disconnects', () => {
    it('a client disconnecting mid-work over a real HTTP server does not cancel the work or the write of its result', GATED, async () => {
      const entered = deferred();
      const gate = deferred();
      const { app, counter, rows } = await setup(async (_req, ctx) => {
        entered.resolve();
        await gate.promise;
        return jsonReply(201, await ctx!.phase('charge', async () => ({ id: 'ch_disc' })));
      });
      const base = await app.serve();
      const abort = new AbortController();
      const gone = fetch(base + '/v1/charges', { ...requestInit({ key: 'disc', json: { amount: 1 } }), signal: abort.signal }).then(
        () => 'answered',
        () => 'aborted',
      );
      await entered.promise;
      abort.abort();
      assert.equal(await gone, 'aborted');
      gate.resolve();
      const row = await poll(async () => (await rows()).find((r) => r.state === 'done'), 3000, 'the result to be stored');
      assert.equal(row.response_status, 201);
      const retry = await fetch(base + '/v1/charges', requestInit({ key: 'disc', json: { amount: 1 } }));
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await retry.json(), { id: 'ch_disc' });
      assert.equal(counter.H, 1);
    });
  });

  describe('scope', () => {
    it('two Authorization credentials with the same key and body each run once and get their own response', async () => {
      const { send, counter, count } = await setup((req) => jsonReply(201, { owner: req.headers.get('authorization') }));
      const as = (token: string) => ({ key: 'shared', json: { amount: 1 }, headers: { authorization: `Bearer ${token}` } });
      const a = await send('/v1/charges', as('sk_tenant_a'));
      const b = await send('/v1/charges', as('sk_tenant_b'));
      assert.equal(a.status, 201);
      assert.equal(b.status, 201);
      assert.equal(b.headers.get('idempotent-replayed'), null);
      assert.deepEqual(await a.json(), { owner: 'Bearer sk_tenant_a' });
      assert.deepEqual(await b.json(), { owner: 'Bearer sk_tenant_b' });
      const ra = await send('/v1/charges', as('sk_tenant_a'));
      const rb = await send('/v1/charges', as('sk_tenant_b'));
      assert.equal(ra.headers.get('idempotent-replayed'), 'true');
      assert.equal(rb.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await ra.json(), { owner: 'Bearer sk_tenant_a' });
      assert.deepEqual(await rb.json(), { owner: 'Bearer sk_tenant_b' });
      assert.equal(counter.H, 2);
      assert.equal(await count(), 2);
    });

    it('the raw Authorization value is never stored: the scope column holds its SHA-256', async () => {
      const { send, rows, dump } = await setup(created);
      const secret = 'Bearer sk_live_very_secret_value_123';
      await (await send('/v1/charges', { key: 'scoped', json: {}, headers: { authorization: secret } })).arrayBuffer();
      await (await send('/v1/charges', { key: 'scoped', json: {} })).arrayBuffer();
      const hashed = 'auth:' + createHash('sha256').update(secret).digest('base64url');
      assert.deepEqual((await rows()).map((r) => r.scope).sort(), [hashed, 'public'].sort());
      assert.ok(!(await dump()).includes('sk_live_very_secret_value_123'), 'the credential appears nowhere in the table');
    });

    it('without Authorization, two different Cookie headers with the same key and body each run once (H=2); the same Cookie replays', async () => {
      const counted = { n: 0 };
      const { send, counter, rows } = await setup((req) => jsonReply(201, { session: req.headers.get('cookie'), n: ++counted.n }));
      const alice = { cookie: 'sid=alice-session-1; theme=dark' };
      const bob = { cookie: 'sid=bob-session-2; theme=dark' };
      const a = await send('/v1/orders', { key: 'cart-1', json: { sku: 'x' }, headers: alice });
      const b = await send('/v1/orders', { key: 'cart-1', json: { sku: 'x' }, headers: bob });
      assert.equal(a.status, 201);
      assert.equal(b.status, 201);
      assert.equal(b.headers.get('idempotent-replayed'), null, "bob does not get alice's response");
      assert.deepEqual(await a.json(), { session: alice.cookie, n: 1 });
      assert.deepEqual(await b.json(), { session: bob.cookie, n: 2 });
      assert.equal(counter.H, 2);
      const ra = await send('/v1/orders', { key: 'cart-1', json: { sku: 'x' }, headers: alice });
      assert.equal(ra.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await ra.json(), { session: alice.cookie, n: 1 });
      const anonymous = await send('/v1/orders', { key: 'cart-1', json: { sku: 'x' } });
      assert.equal(anonymous.headers.get('idempotent-replayed'), null, 'no credential at all: the shared public scope, not a cookie scope');
      await anonymous.arrayBuffer();
      assert.equal(counter.H, 3);
      const cookieScope = (cookie: string) => 'cookie:' + createHash('sha256').update(cookie).digest('base64url');
      assert.deepEqual((await rows()).map((r) => r.scope).sort(), [cookieScope(alice.cookie), cookieScope(bob.cookie), 'public'].sort());
    });

    it('the raw Cookie value is never stored; Authorization, when present, decides the scope instead of Cookie', async () => {
      const { send, counter, rows, dump } = await setup(() => jsonReply(201, { ok: true }));
      const cookie = 'session=cookie_very_secret_value_456';
      await (await send('/v1/orders', { key: 'c1', json: {}, headers: { cookie } })).arrayBuffer();
      // With Authorization the cookie does not matter: a rotated cookie still replays.
      const authorization = 'Bearer sk_with_cookie';
      await (await send('/v1/orders', { key: 'c2', json: {}, headers: { cookie, authorization } })).arrayBuffer();
      const rotated = await send('/v1/orders', { key: 'c2', json: {}, headers: { cookie: 'session=rotated', authorization } });
      assert.equal(rotated.headers.get('idempotent-replayed'), 'true');
      await rotated.arrayBuffer();
      assert.equal(counter.H, 2);
      assert.deepEqual((await rows()).map((r) => r.scope).sort(), [
        'auth:' + createHash('sha256').update(authorization).digest('base64url'),
        'cookie:' + createHash('sha256').update(cookie).digest('base64url'),
      ].sort());
      assert.ok(!(await dump()).includes('cookie_very_secret_value_456'), 'the cookie appears nowhere in the table');
    });

    it('a custom scope resolver decides the scope (Authorization is then ignored)', async () => {
      const { send, counter, rows } = await setup(created, { scope: (req) => `tenant:${req.headers.get('x-tenant') ?? 'none'}` });
      await (await send('/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't1', authorization: 'Bearer old-token' } })).arrayBuffer();
      const rotated = await send('/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't1', authorization: 'Bearer refreshed-token' } });
      assert.equal(rotated.headers.get('idempotent-replayed'), 'true', 'same tenant, rotated credential: one scope');
      const other = await send('/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't2', authorization: 'Bearer old-token' } });
      assert.equal(other.headers.get('idempotent-replayed'), null, 'another tenant, same credential: its own scope');
      await Promise.all([rotated.arrayBuffer(), other.arrayBuffer()]);
      assert.equal(counter.H, 2);
      assert.deepEqual((await rows()).map((r) => r.scope), ['tenant:t1', 'tenant:t2']);
    });
  });

  describe('what gets stored', () => {
    const validating: Route = async (req, ctx) => {
      const body = await req.json<{ amount?: unknown }>();
      if (typeof body.amount !== 'number') return jsonReply(400, { error: 'amount required' });
      const charge = await ctx!.phase('charge', async (tx) => {
        await touch(tx);
        return { id: 'ch_ok', amount: body.amount };
      });
      return jsonReply(201, charge);
    };

    it('a 400 returned before any phase is not stored and frees the key: the fixed retry with the same key runs', async () => {
      const { send, counter, count } = await setup(validating);
      const bad = await send('/v1/charges', { key: 'fix-me', json: { amt: 1 } });
      assert.equal(bad.status, 400);
      assert.deepEqual(await bad.json(), { error: 'amount required' });
      assert.equal(counter.H, 1);
      assert.equal(await count(), 0, 'nothing stored, the claim is deleted');
      const again = await send('/v1/charges', { key: 'fix-me', json: { amt: 1 } });
      assert.equal(again.status, 400);
      assert.equal(again.headers.get('idempotent-replayed'), null);
      await again.arrayBuffer();
      assert.equal(counter.H, 2, 'the same invalid request runs again, it is not replayed');
      const fixed = await send('/v1/charges', { key: 'fix-me', json: { amount: 7 } });
      assert.equal(fixed.status, 201);
      assert.equal(fixed.headers.get('idempotent-replayed'), null);
      assert.deepEqual(await fixed.json(), { id: 'ch_ok', amount: 7 });
      assert.equal(counter.H, 3);
      assert.equal(await count(), 1);
    });

    it('ctx.reject() with a 409 is not stored and frees the key', async () => {
      let conflict = true;
      const { send, counter, count } = await setup((_req, ctx) => {
        if (!conflict) return jsonReply(201, { ok: true });
        ctx!.reject();
        return jsonReply(409, { error: 'version conflict' });
      });
      const first = await send('/v1/orders', { key: 'rej-1', json: { v: 1 } });
      assert.equal(first.status, 409);
      assert.equal(await first.text(), '{"error":"version conflict"}');
      assert.equal(await count(), 0);
      conflict = false;
      const retry = await send('/v1/orders', { key: 'rej-1', json: { v: 1 } });
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get('idempotent-replayed'), null);
      await retry.arrayBuffer();
      assert.equal(counter.H, 2);
      assert.equal(await count(), 1);
    });

    it('a 409 the handler returns without reject() is stored and replayed', async () => {
      const { send, counter } = await setup(() => jsonReply(409, { error: 'conflict' }));
      const first = await send('/v1/orders', { key: 'own-409', json: {} });
      assert.equal(first.status, 409);
      await first.arrayBuffer();
      const replay = await send('/v1/orders', { key: 'own-409', json: {} });
      assert.equal(replay.status, 409);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await replay.arrayBuffer();
      assert.equal(counter.H, 1);
    });

    it('a 400 returned after a phase committed is stored and replayed', async () => {
      const { send, counter, rows } = await setup(async (_req, ctx) => {
        await ctx!.phase('reserved', async () => ({ reserved: true }));
        ctx!.reject(); // has no effect once work started
        return jsonReply(400, { error: 'declined after reserve' });
      });
      const first = await send('/v1/orders', { key: 'late-400', json: {} });
      assert.equal(first.status, 400);
      await first.arrayBuffer();
      const [row] = await rows();
      assert.equal(row!.state, 'done');
      assert.equal(row!.response_status, 400);
      const replay = await send('/v1/orders', { key: 'late-400', json: {} });
      assert.equal(replay.status, 400);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(await replay.text(), '{"error":"declined after reserve"}');
      assert.equal(counter.H, 1);
    });
  });

  describe('thrown errors', () => {
    it('default onThrow release: a throw after a committed phase gives a 500 request-failed-retry problem; the retry resumes after that phase', async () => {
      const runs = { a: 0, b: 0 };
      let crash = true;
      const { send, counter, rows, errors } = await setup(async (_req, ctx) => {
        const a = await ctx!.phase('a', async (tx) => {
          runs.a++;
          await touch(tx);
          return { n: 1 };
        });
        if (crash) {
          crash = false;
          throw new Error('downstream exploded');
        }
        const b = await ctx!.phase('b', async () => {
          runs.b++;
          return 2;
        });
        return jsonReply(201, { a, b, resumed: ctx!.resumed });
      });
      const problem = await assertProblem(await send('/v1/transfers', { key: 'crash-1', json: { amount: 1 } }), 500, 'request-failed-retry');
      assert.match(String(problem.detail), /same idempotency key/i);
      assert.equal(errors.length, 1);
      const [row] = await rows();
      assert.deepEqual([row!.state, row!.recovery_point, row!.locked], ['started', 'a', false], 'the lease was released at recovery point a');
      const retry = await send('/v1/transfers', { key: 'crash-1', json: { amount: 1 } });
      assert.equal(retry.status, 201);
      assert.deepEqual(await retry.json(), { a: { n: 1 }, b: 2, resumed: true });
      assert.deepEqual(runs, { a: 1, b: 1 }, 'phase a is not run again, b runs once');
      assert.equal(counter.H, 2);
      const replay = await send('/v1/transfers', { key: 'crash-1', json: { amount: 1 } });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await replay.arrayBuffer();
      assert.equal(counter.H, 2);
    });

    it("onThrow: 'store' stores the 500 problem and replays it", async () => {
      const { send, counter, rows } = await setup(async (_req, ctx) => {
        await ctx!.phase('a', async () => 1);
        throw new Error('boom');
      }, { onThrow: 'store' });
      const first = await send('/v1/transfers', { key: 'store-500', json: {} });
      const firstText = await first.clone().text();
      await assertProblem(first, 500, 'request-failed-retry');
      assert.equal((await rows())[0]!.state, 'done');
      const replay = await send('/v1/transfers', { key: 'store-500', json: {} });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(await replay.clone().text(), firstText);
      await assertProblem(replay, 500, 'request-failed-retry');
      assert.equal(counter.H, 1);
    });
  });

  describe('ctx.respond', () => {
    /** How many business effects took hold. */
    const effectCount = async () => (await current.effects()).length;

    it('commits the effect and the stored response together; the response sent equals the replay byte for byte', async () => {
      let lastId = 0;
      const { send, counter, rows } = await setup(async (_req, ctx) =>
        ctx!.respond(async (tx) => {
          await current.effect('paid')(tx);
          const id = ++lastId;
          return new Response(JSON.stringify({ id, at: Math.random() }), {
            status: 201,
            headers: { 'content-type': 'application/json', location: `/v1/payments/${id}` },
          });
        }),
      );
      const first = await send('/v1/payments', { key: 'respond-1', json: { amount: 1 } });
      assert.equal(first.status, 201);
      const firstBytes = await bytes(first);
      const [row] = await rows();
      assert.equal(row!.state, 'done');
      assert.equal(row!.response_body, hex(firstBytes), 'the stored body is what was sent');
      assert.equal(await effectCount(), 1);
      const replay = await send('/v1/payments', { key: 'respond-1', json: { amount: 1 } });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(replay.headers.get('location'), first.headers.get('location'));
      assert.equal(hex(await bytes(replay)), hex(firstBytes));
      assert.equal(counter.H, 1);
      assert.equal(await effectCount(), 1);
    });

    it('when the finishing write is fenced (another worker took over), the effect rolls back with it', async () => {
      let held: number | undefined;
      const app = await setup(async (_req, ctx) =>
        ctx!.respond(async (tx) => {
          held = ctx!.execution.token;
          await current.effect('paid')(tx);
          // Simulate a takeover racing this transaction: the token moves on.
          await current.staleInTx(tx, ctx!.scope, ctx!.key);
          return toJson201();
        }),
      );
      await assertProblem(await app.send('/v1/payments', { key: 'fenced-1', json: {} }), 409, 'idempotency-lease-lost');
      assert.equal(await effectCount(), 0, 'the effect was rolled back');
      const [row] = await app.rows();
      assert.equal(row!.state, 'started');
      assert.equal(row!.response_status, null);
      assert.ok(held !== undefined && held > 0, `the handler held a token (${held})`);
      assert.equal(row!.lock_version, String(held), 'the token bump in the same transaction rolled back too');
    });

    it('when the respond callback throws after its effect, neither the effect nor a response is stored; the retry runs', async () => {
      let crash = true;
      const { send, counter, rows } = await setup(async (_req, ctx) =>
        ctx!.respond(async (tx) => {
          await current.effect('paid')(tx);
          if (crash) {
            crash = false;
            throw new Error('after insert');
          }
          return toJson201();
        }),
      );
      await assertProblem(await send('/v1/payments', { key: 'throw-1', json: {} }), 500, 'request-failed-retry');
      assert.equal(await effectCount(), 0);
      assert.equal((await rows())[0]!.response_status, null);
      const retry = await send('/v1/payments', { key: 'throw-1', json: {} });
      assert.equal(retry.status, 201);
      await retry.arrayBuffer();
      assert.equal(counter.H, 2);
      assert.equal(await effectCount(), 1);
    });
  });

  describe('retention', () => {
    it('after retention the same key runs fresh; replays do not extend retention', async () => {
      const { send, counter, count } = await setup(created, { retentionMs: 1500, leaseMs: 500, heartbeatMs: 0 });
      const started = Date.now();
      const first = await send('/v1/charges', { key: 'ret-1', json: {} });
      assert.equal(first.status, 201);
      await first.arrayBuffer();
      let replays = 0;
      // Every 100 ms on the suite's clock (the memory store's moves without waiting).
      const fresh = await eventually(
        async () => {
          const res = await send('/v1/charges', { key: 'ret-1', json: {} });
          await res.arrayBuffer();
          if (res.headers.get('idempotent-replayed') === 'true') replays++;
          return res;
        },
        (res) => res.headers.get('idempotent-replayed') !== 'true',
        { timeoutMs: 4000, everyMs: 100, time },
      );
      const elapsed = Date.now() - started;
      assert.equal(fresh.status, 201);
      assert.ok(replays >= 3, `replays kept coming while retention ran (${replays})`);
      assert.ok(elapsed >= 1000, `expired after ${elapsed} ms, not before retention`);
      assert.equal(counter.H, 2);
      assert.equal(await count(), 1, 'the expired row was replaced');
    });
  });

  describe('problem details', () => {
    it('every idem problem is application/problem+json with status = HTTP status and a distinct type per condition', GATED, async () => {
      const entered = deferred();
      const gate = deferred();
      const { send } = await setup(async (req, ctx) => {
        if (ctx?.key === 'p2') {
          entered.resolve();
          await gate.promise;
          return { status: 204 };
        }
        if (ctx?.key === 'p3') throw new Error('x');
        return created(req, ctx);
      }, { required: true, leaseMs: 5000 });
      const types = new Map<string, number>();
      const record = async (res: Response, status: number, kind: string) => {
        const p = await assertProblem(res, status, kind);
        types.set(p.type, status);
      };
      await record(await send('/v1/x', { json: {} }), 400, 'idempotency-key-missing');
      await record(await send('/v1/x', { key: '', json: {} }), 400, 'idempotency-key-invalid');
      await (await send('/v1/x', { key: 'p1', json: { a: 1 } })).arrayBuffer();
      await record(await send('/v1/x', { key: 'p1', json: { a: 2 } }), 422, 'idempotency-key-reused');
      const slow = send('/v1/x', { key: 'p2' });
      await entered.promise;
      await record(await send('/v1/x', { key: 'p2' }), 409, 'request-in-progress');
      gate.resolve();
      await (await slow).arrayBuffer();
      await record(await send('/v1/x', { key: 'p3' }), 500, 'request-failed-retry');
      const down = unreachableStore();
      try {
        const offline = harness.build({ store: down.store, required: true }, () => ({ status: 200, body: 'ran' }), cleanup);
        await record(await offline.send('/v1/x', requestInit({ key: 'p4' })), 503, 'idempotency-store-unavailable');
      } finally {
        await down.close();
      }
      assert.equal(types.size, 6, `distinct types: ${[...types.keys()].join(', ')}`);
    });

    it('problems.stripe adds error {type, code, message}; problems.docsUrl adds Link rel="describedby"', async () => {
      const docsUrl = 'https://docs.example.com/errors/idempotency';
      const { send } = await setup(created, { required: true, problems: { stripe: true, docsUrl } });
      const link = `<${docsUrl}>; rel="describedby"`;
      const missing = await send('/v1/x', { json: {} });
      assert.equal(missing.headers.get('link'), link);
      const body = await assertProblem(missing, 400, 'idempotency-key-missing');
      assert.deepEqual(body.error, { type: 'invalid_request_error', code: 'idempotency_key_missing', message: body.detail });
      const invalid = await send('/v1/x', { key: 'x'.repeat(300), json: {} });
      assert.equal(invalid.headers.get('link'), link);
      const invalidBody = await assertProblem(invalid, 400, 'idempotency-key-invalid');
      assert.deepEqual(invalidBody.error, { type: 'invalid_request_error', code: 'idempotency_key_invalid', message: invalidBody.detail });
      await (await send('/v1/x', { key: 's1', json: { a: 1 } })).arrayBuffer();
      const reused = await send('/v1/x', { key: 's1', json: { a: 2 } });
      assert.equal(reused.headers.get('link'), link);
      const reusedBody = await assertProblem(reused, 422, 'idempotency-key-reused');
      assert.deepEqual(reusedBody.error, { type: 'idempotency_error', code: 'idempotency_key_reused', message: reusedBody.detail });
    });

    it('without the stripe option there is no error member and no Link', async () => {
      const { send } = await setup(created, { required: true });
      const res = await send('/v1/x', { json: {} });
      assert.equal(res.headers.get('link'), null);
      const body = await assertProblem(res, 400, 'idempotency-key-missing');
      assert.equal(body.error, undefined);
    });
  });
}

const toJson201 = () => new Response('{"ok":true}', { status: 201, headers: { 'content-type': 'application/json' } });

/**
 * The part of the contract that needs no database: with an unreachable store the adapter
 * fails closed. Registered once per adapter, outside the engine loop.
 */
export function unreachableStoreContract(harness: AdapterHarness, cleanup: (fn: () => Promise<void>) => void): void {
  it('answers a 503 idempotency-store-unavailable problem with Retry-After: 1 and does not run the handler (fail closed)', async () => {
    const down = unreachableStore();
    try {
      let H = 0;
      const app = harness.build({ store: down.store }, () => {
        H++;
        return { status: 201, body: 'ran' };
      }, cleanup);
      const res = await app.send('/v1/charges', requestInit({ key: 'k-down', json: { amount: 1 } }));
      assert.equal(res.headers.get('retry-after'), '1');
      await assertProblem(res, 503, 'idempotency-store-unavailable');
      assert.equal(H, 0);
    } finally {
      await down.close();
    }
  });
}
