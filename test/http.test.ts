/**
 * The web-standard HTTP core, `new HttpIdempotency({...}).handle(request, handler)`, against
 * real databases (PGlite always, PostgreSQL when DATABASE_URL is set). H counts how many
 * times the handler's work ran; every behaviour is checked against the key table as well.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { HttpIdempotency, type IdempotencyOptions } from '../src/http/idempotency.js';
import type { IdempotencyContext } from '../src/http/context.js';
import type { Queryable, SqlClient } from '../src/postgres/client.js';
import { engines, freshStore, tableName } from './helpers/engines.js';
import { assertProblem, countRows, deferred, hex, keyRows, INVALID_KEYS, poll, tableText, unreachableStore } from './helpers/http.js';

const BASE = 'http://api.test';
type Ctx = IdempotencyContext<Queryable> | undefined;
type Handler = (request: Request, ctx: Ctx) => Response | Promise<Response>;

interface Send {
  method?: string;
  key?: string;
  json?: unknown;
  body?: string | Uint8Array;
  headers?: Record<string, string>;
}

function request(path: string, send: Send = {}): Request {
  const headers = new Headers(send.headers);
  if (send.key !== undefined) headers.set('Idempotency-Key', send.key);
  let body: string | Uint8Array | undefined = send.body;
  if (send.json !== undefined) {
    body = JSON.stringify(send.json);
    headers.set('content-type', 'application/json');
  }
  return new Request(BASE + path, { method: send.method ?? 'POST', headers, body: body ?? null });
}

const bytes = async (response: Response): Promise<Uint8Array> => new Uint8Array(await response.arrayBuffer());

for (const engine of engines) {
  describe(`HTTP core over ${engine.name}`, () => {
    let db: { client: SqlClient; close(): Promise<void> };
    const drops: Array<() => Promise<void>> = [];
    before(async () => {
      db = await engine.open();
    });
    after(async () => {
      for (const drop of drops) await drop().catch(() => undefined);
      await db.close();
    });

    /** A core on a fresh table, with H counting handler runs. */
    async function setup(options: Partial<IdempotencyOptions<Queryable>> = {}) {
      const { store, table, drop } = await freshStore(db.client);
      drops.push(drop);
      const errors: unknown[] = [];
      const idem = new HttpIdempotency<Queryable>({ store, onHandlerError: (e) => errors.push(e), ...options });
      const counter = { H: 0 };
      const send = (handler: Handler, path: string, s: Send = {}) =>
        idem.handle(request(path, s), async (req, ctx) => {
          counter.H++;
          return handler(req, ctx);
        });
      return { idem, table, counter, errors, send, rows: () => keyRows(db.client, table), count: () => countRows(db.client, table) };
    }

    /** A handler answering 201 JSON with allow-listed and never-replayed headers. */
    const created: Handler = async (req) => {
      const text = await req.text();
      const headers = new Headers({
        'content-type': 'application/json',
        location: '/v1/charges/ch_1',
        etag: '"v1"',
        'x-request-id': `req-${Math.random()}`,
      });
      headers.append('set-cookie', 'session=s3cr3t; HttpOnly');
      return new Response(JSON.stringify({ id: 'ch_1', received: text.length, at: Math.random() }), { status: 201, headers });
    };

    describe('which requests are protected', () => {
      it('GET, PUT and DELETE with a key pass through unprotected: the handler runs every time, no row is written', async () => {
        const { send, counter, count } = await setup({ required: true });
        const seen: Ctx[] = [];
        const handler: Handler = (_req, ctx) => {
          seen.push(ctx);
          return new Response('ok', { status: 200 });
        };
        for (const method of ['GET', 'PUT', 'DELETE', 'GET', 'PUT', 'DELETE']) {
          const res = await send(handler, '/v1/things/1', { method, key: 'same-key', body: method === 'PUT' ? 'x' : undefined });
          assert.equal(res.status, 200);
          assert.equal(res.headers.get('idempotent-replayed'), null);
        }
        assert.equal(counter.H, 6);
        assert.deepEqual(seen, [undefined, undefined, undefined, undefined, undefined, undefined]);
        assert.equal(await count(), 0);
      });

      it('a POST without a key passes through unprotected when the key is not required', async () => {
        const { send, counter, count } = await setup();
        let ctxSeen: Ctx | 'unset' = 'unset';
        const handler: Handler = async (req, ctx) => {
          ctxSeen = ctx;
          return new Response(await req.text(), { status: 201 });
        };
        const a = await send(handler, '/v1/charges', { json: { amount: 1 } });
        const b = await send(handler, '/v1/charges', { json: { amount: 1 } });
        assert.equal(a.status, 201);
        assert.equal(await a.text(), '{"amount":1}', 'the handler can still read the body');
        assert.equal(b.status, 201);
        assert.equal(b.headers.get('idempotent-replayed'), null);
        assert.equal(ctxSeen, undefined);
        assert.equal(counter.H, 2);
        assert.equal(await count(), 0);
      });

      it('required: true — a POST without a key gets a 400 idempotency-key-missing problem, H=0, nothing stored', async () => {
        const { send, counter, count } = await setup({ required: true });
        const res = await send(created, '/v1/charges', { json: { amount: 1 } });
        const problem = await assertProblem(res, 400, 'idempotency-key-missing');
        assert.match(String(problem.detail), /Idempotency-Key/);
        const patch = await send(created, '/v1/charges/1', { method: 'PATCH', json: { amount: 1 } });
        await assertProblem(patch, 400, 'idempotency-key-missing');
        assert.equal(counter.H, 0);
        assert.equal(await count(), 0);
      });
    });

    describe('the key', () => {
      for (const [name, value] of [...INVALID_KEYS, ['a key with a control character (0x01)', 'a\x01b'] as [string, string]]) {
        it(`${name} gets a 400 idempotency-key-invalid problem, H=0, no row`, async () => {
          const { send, counter, count } = await setup();
          const res = await send(created, '/v1/charges', { key: value, json: { amount: 1 } });
          await assertProblem(res, 400, 'idempotency-key-invalid');
          assert.equal(counter.H, 0);
          assert.equal(await count(), 0);
        });
      }

      it('a 255-character key is accepted and stored whole (never truncated)', async () => {
        const { send, counter, rows } = await setup();
        const key = 'k'.repeat(254) + 'z';
        assert.equal((await send(created, '/v1/charges', { key, json: {} })).status, 201);
        const [row] = await rows();
        assert.equal(row!.key, key);
        assert.equal((await send(created, '/v1/charges', { key, json: {} })).headers.get('idempotent-replayed'), 'true');
        assert.equal(counter.H, 1);
      });

      it('the sf-string "k1" and the bare token k1 are the same key: the second is a replay', async () => {
        const { send, counter, rows } = await setup();
        const first = await send(created, '/v1/charges', { key: '"k1"', json: { amount: 5 } });
        assert.equal(first.status, 201);
        const second = await send(created, '/v1/charges', { key: 'k1', json: { amount: 5 } });
        assert.equal(second.status, 201);
        assert.equal(second.headers.get('idempotent-replayed'), 'true');
        assert.equal(hex(await bytes(second)), hex(await bytes(first)));
        assert.equal(counter.H, 1);
        assert.deepEqual((await rows()).map((r) => r.key), ['k1']);
      });
    });

    describe('first execution and replay', () => {
      it('a retry gets the same status, byte-identical body, allow-listed headers and Idempotent-Replayed: true', async () => {
        const { send, counter, rows } = await setup();
        const first = await send(created, '/v1/charges', { key: 'replay-1', json: { amount: 100 } });
        assert.equal(first.status, 201);
        assert.equal(first.headers.get('idempotent-replayed'), null);
        const firstBody = await bytes(first);
        const [row] = await rows();
        assert.equal(row!.state, 'done');
        assert.equal(row!.response_status, 201);
        assert.equal(row!.response_body, hex(firstBody));

        for (let i = 0; i < 2; i++) {
          const replay = await send(created, '/v1/charges', { key: 'replay-1', json: { amount: 100 } });
          assert.equal(replay.status, 201);
          assert.equal(hex(await bytes(replay)), hex(firstBody));
          assert.equal(replay.headers.get('idempotent-replayed'), 'true');
          for (const name of ['content-type', 'location', 'etag']) {
            assert.equal(replay.headers.get(name), first.headers.get(name), name);
            assert.ok(replay.headers.get(name), `replayed ${name}`);
          }
        }
        assert.equal(counter.H, 1);
      });

      it('Set-Cookie and x-request-id are in the first response but never in the replay (nor stored)', async () => {
        const { send, rows } = await setup();
        const first = await send(created, '/v1/charges', { key: 'cookie-1', json: {} });
        assert.deepEqual(first.headers.getSetCookie(), ['session=s3cr3t; HttpOnly']);
        assert.match(first.headers.get('x-request-id') ?? '', /^req-/);
        const replay = await send(created, '/v1/charges', { key: 'cookie-1', json: {} });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(replay.headers.getSetCookie(), []);
        assert.equal(replay.headers.get('x-request-id'), null);
        const stored = JSON.stringify((await rows())[0]!.response_headers);
        assert.doesNotMatch(stored, /s3cr3t|set-cookie|x-request-id/i);
      });

      it('a binary body with 0x00 and 0xff bytes round-trips exactly, request and response', async () => {
        const { send, counter } = await setup();
        const payload = new Uint8Array([0x00, 0xff, 0x00, 0x7f, 0x80, 0xfe, 0x0d, 0x0a, 0x00]);
        const handler: Handler = async (req) => {
          const got = new Uint8Array(await req.arrayBuffer());
          assert.equal(hex(got), hex(payload), 'the handler receives the exact request bytes');
          return new Response(new Uint8Array([0xff, ...got, 0x00]), { status: 201, headers: { 'content-type': 'application/octet-stream' } });
        };
        const opts = { key: 'bin-1', body: payload, headers: { 'content-type': 'application/octet-stream' } };
        const first = await send(handler, '/v1/blobs', opts);
        const firstBytes = await bytes(first);
        assert.equal(hex(firstBytes), 'ff' + hex(payload) + '00');
        const replay = await send(handler, '/v1/blobs', opts);
        assert.equal(replay.status, 201);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(replay.headers.get('content-type'), 'application/octet-stream');
        assert.equal(hex(await bytes(replay)), hex(firstBytes));
        assert.equal(counter.H, 1);
      });

      it('an empty 204 round-trips exactly', async () => {
        const { send, counter, rows } = await setup();
        const handler: Handler = () => new Response(null, { status: 204, headers: { etag: '"e204"' } });
        const first = await send(handler, '/v1/things/1/archive', { key: 'nc-1' });
        assert.equal(first.status, 204);
        assert.equal((await bytes(first)).length, 0);
        const replay = await send(handler, '/v1/things/1/archive', { key: 'nc-1' });
        assert.equal(replay.status, 204);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(replay.headers.get('etag'), '"e204"');
        assert.equal(replay.body, null);
        assert.equal(counter.H, 1);
        assert.equal((await rows())[0]!.response_body, '');
      });

      for (const status of [402, 500]) {
        it(`a returned ${status} is stored and replayed (H=1)`, async () => {
          const { send, counter, rows } = await setup();
          const handler: Handler = () =>
            new Response(JSON.stringify({ error: { code: status === 402 ? 'card_declined' : 'oops' } }), {
              status,
              headers: { 'content-type': 'application/json' },
            });
          const first = await send(handler, '/v1/charges', { key: `s-${status}`, json: { amount: 1 } });
          assert.equal(first.status, status);
          const firstBody = await first.text();
          const replay = await send(handler, '/v1/charges', { key: `s-${status}`, json: { amount: 1 } });
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
        const { send, counter } = await setup();
        const first = await send(created, '/v1/charges', { key: 'order-1', body: '{"amount":100,"currency":"eur","meta":{"a":1,"b":2}}', headers: { 'content-type': 'application/json' } });
        assert.equal(first.status, 201);
        const retry = await send(created, '/v1/charges', { key: 'order-1', body: '{ "meta": {"b":2, "a":1.0}, "currency":"eur", "amount":100 }', headers: { 'content-type': 'application/json' } });
        assert.equal(retry.status, 201);
        assert.equal(retry.headers.get('idempotent-replayed'), 'true');
        assert.equal(await retry.text(), await first.text());
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
          const { send, counter, rows } = await setup();
          const first = await send(created, path1, { ...send1, key: 'reuse-1' });
          assert.equal(first.status, 201);
          const firstBody = await first.text();
          const before = await rows();
          const other = await send(created, path2, { ...send2, key: 'reuse-1' });
          await assertProblem(other, 422, 'idempotency-key-reused');
          assert.deepEqual(await rows(), before, 'the stored row is untouched');
          const replay = await send(created, path1, { ...send1, key: 'reuse-1' });
          assert.equal(replay.status, 201);
          assert.equal(replay.headers.get('idempotent-replayed'), 'true');
          assert.equal(await replay.text(), firstBody);
          assert.equal(counter.H, 1);
        });
      }

      it('mismatchStatus: 409 answers a reused key with 409', async () => {
        const { send, counter } = await setup({ mismatchStatus: 409 });
        assert.equal((await send(created, '/v1/charges', { key: 'm409', json: { amount: 1 } })).status, 201);
        await assertProblem(await send(created, '/v1/charges', { key: 'm409', json: { amount: 2 } }), 409, 'idempotency-key-reused');
        assert.equal(counter.H, 1);
      });

      it('a different body while the first request is still running gets 422, not 409', async () => {
        const { send, counter } = await setup();
        const entered = deferred();
        const gate = deferred();
        const slow: Handler = async (req) => {
          entered.resolve();
          await gate.promise;
          return created(req, undefined);
        };
        const first = send(slow, '/v1/charges', { key: 'running-1', json: { amount: 1 } });
        await entered.promise;
        const other = await send(slow, '/v1/charges', { key: 'running-1', json: { amount: 2 } });
        await assertProblem(other, 422, 'idempotency-key-reused');
        gate.resolve();
        assert.equal((await first).status, 201);
        assert.equal(counter.H, 1);
      });
    });

    describe('concurrency', () => {
      it('the same key while the first is running gets a 409 request-in-progress problem with Retry-After in [1, ceil(lease/1000)]', async () => {
        const leaseMs = 5000;
        const { send, counter, count } = await setup({ leaseMs });
        const entered = deferred();
        const gate = deferred();
        const slow: Handler = async (req) => {
          entered.resolve();
          await gate.promise;
          return created(req, undefined);
        };
        const first = send(slow, '/v1/charges', { key: 'busy-1', json: { amount: 1 } });
        await entered.promise;
        const busy = await send(slow, '/v1/charges', { key: 'busy-1', json: { amount: 1 } });
        const retryAfter = busy.headers.get('retry-after') ?? '';
        await assertProblem(busy, 409, 'request-in-progress');
        assert.match(retryAfter, /^\d+$/);
        assert.ok(Number(retryAfter) >= 1 && Number(retryAfter) <= Math.ceil(leaseMs / 1000), `Retry-After ${retryAfter}`);
        gate.resolve();
        const done = await first;
        assert.equal(done.status, 201);
        const replay = await send(slow, '/v1/charges', { key: 'busy-1', json: { amount: 1 } });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(counter.H, 1);
        assert.equal(await count(), 1);
      });
    });

    describe('scope', () => {
      it('two Authorization credentials with the same key and body each run once and get their own response', async () => {
        const { send, counter, count } = await setup();
        const handler: Handler = (req) => new Response(JSON.stringify({ owner: req.headers.get('authorization') }), { status: 201, headers: { 'content-type': 'application/json' } });
        const a = await send(handler, '/v1/charges', { key: 'shared', json: { amount: 1 }, headers: { authorization: 'Bearer sk_tenant_a' } });
        const b = await send(handler, '/v1/charges', { key: 'shared', json: { amount: 1 }, headers: { authorization: 'Bearer sk_tenant_b' } });
        assert.equal(a.status, 201);
        assert.equal(b.status, 201);
        assert.equal(b.headers.get('idempotent-replayed'), null);
        assert.deepEqual(await a.json(), { owner: 'Bearer sk_tenant_a' });
        assert.deepEqual(await b.json(), { owner: 'Bearer sk_tenant_b' });
        const ra = await send(handler, '/v1/charges', { key: 'shared', json: { amount: 1 }, headers: { authorization: 'Bearer sk_tenant_a' } });
        const rb = await send(handler, '/v1/charges', { key: 'shared', json: { amount: 1 }, headers: { authorization: 'Bearer sk_tenant_b' } });
        assert.deepEqual(await ra.json(), { owner: 'Bearer sk_tenant_a' });
        assert.deepEqual(await rb.json(), { owner: 'Bearer sk_tenant_b' });
        assert.equal(ra.headers.get('idempotent-replayed'), 'true');
        assert.equal(rb.headers.get('idempotent-replayed'), 'true');
        assert.equal(counter.H, 2);
        assert.equal(await count(), 2);
      });

      it('the raw Authorization value is never stored: the scope column holds its SHA-256', async () => {
        const { send, rows, table } = await setup();
        const secret = 'Bearer sk_live_very_secret_value_123';
        await send(created, '/v1/charges', { key: 'scoped', json: {}, headers: { authorization: secret } });
        await send(created, '/v1/charges', { key: 'scoped', json: {} });
        const scopes = (await rows()).map((r) => r.scope).sort();
        const hashed = 'auth:' + createHash('sha256').update(secret).digest('base64url');
        assert.deepEqual(scopes, [hashed, 'public'].sort());
        const everything = await tableText(db.client, table);
        assert.ok(!everything.includes('sk_live_very_secret_value_123'), 'the credential appears nowhere in the table');
      });

      it('without Authorization, two different Cookie headers with the same key and body each run once (H=2); the same Cookie replays', async () => {
        const { send, counter, rows } = await setup();
        const handler: Handler = (req) =>
          new Response(JSON.stringify({ session: req.headers.get('cookie'), n: counter.H }), { status: 201, headers: { 'content-type': 'application/json' } });
        const alice = { cookie: 'sid=alice-session-1; theme=dark' };
        const bob = { cookie: 'sid=bob-session-2; theme=dark' };
        const a = await send(handler, '/v1/orders', { key: 'cart-1', json: { sku: 'x' }, headers: alice });
        const b = await send(handler, '/v1/orders', { key: 'cart-1', json: { sku: 'x' }, headers: bob });
        assert.equal(a.status, 201);
        assert.equal(b.status, 201);
        assert.equal(b.headers.get('idempotent-replayed'), null, "bob does not get alice's response");
        assert.deepEqual(await a.json(), { session: alice.cookie, n: 1 });
        assert.deepEqual(await b.json(), { session: bob.cookie, n: 2 });
        assert.equal(counter.H, 2);

        const ra = await send(handler, '/v1/orders', { key: 'cart-1', json: { sku: 'x' }, headers: alice });
        assert.equal(ra.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(await ra.json(), { session: alice.cookie, n: 1 });
        const anonymous = await send(handler, '/v1/orders', { key: 'cart-1', json: { sku: 'x' } });
        assert.equal(anonymous.headers.get('idempotent-replayed'), null, 'no credential at all: the shared public scope, not a cookie scope');
        await anonymous.arrayBuffer();
        assert.equal(counter.H, 3);

        const cookieScope = (cookie: string) => 'cookie:' + createHash('sha256').update(cookie).digest('base64url');
        assert.deepEqual((await rows()).map((r) => r.scope).sort(), [cookieScope(alice.cookie), cookieScope(bob.cookie), 'public'].sort());
      });

      it('the raw Cookie value is never stored; Authorization, when present, decides the scope instead of Cookie', async () => {
        const { send, counter, rows, table } = await setup();
        const cookie = 'session=cookie_very_secret_value_456';
        const created201: Handler = () => new Response('{"ok":true}', { status: 201, headers: { 'content-type': 'application/json' } });
        await send(created201, '/v1/orders', { key: 'c1', json: {}, headers: { cookie } });
        // With Authorization the cookie does not matter: a rotated cookie still replays.
        const authorization = 'Bearer sk_with_cookie';
        await send(created201, '/v1/orders', { key: 'c2', json: {}, headers: { cookie, authorization } });
        const rotated = await send(created201, '/v1/orders', { key: 'c2', json: {}, headers: { cookie: 'session=rotated', authorization } });
        assert.equal(rotated.headers.get('idempotent-replayed'), 'true');
        assert.equal(counter.H, 2);
        const scopes = (await rows()).map((r) => r.scope).sort();
        assert.deepEqual(scopes, [
          'auth:' + createHash('sha256').update(authorization).digest('base64url'),
          'cookie:' + createHash('sha256').update(cookie).digest('base64url'),
        ].sort());
        const everything = await tableText(db.client, table);
        assert.ok(!everything.includes('cookie_very_secret_value_456'), 'the cookie appears nowhere in the table');
      });

      it('a custom scope resolver decides the scope (Authorization is then ignored)', async () => {
        const { send, counter, rows } = await setup({ scope: (req) => `tenant:${req.headers.get('x-tenant') ?? 'none'}` });
        await send(created, '/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't1', authorization: 'Bearer old-token' } });
        const rotated = await send(created, '/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't1', authorization: 'Bearer refreshed-token' } });
        assert.equal(rotated.headers.get('idempotent-replayed'), 'true', 'same tenant, rotated credential: one scope');
        const other = await send(created, '/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't2', authorization: 'Bearer old-token' } });
        assert.equal(other.headers.get('idempotent-replayed'), null, 'another tenant, same credential: its own scope');
        assert.equal(counter.H, 2);
        assert.deepEqual((await rows()).map((r) => r.scope), ['tenant:t1', 'tenant:t2']);
      });
    });

    describe('what gets stored', () => {
      const validating: Handler = async (req, ctx) => {
        const body = (await req.json()) as { amount?: unknown };
        if (typeof body.amount !== 'number') {
          return new Response(JSON.stringify({ error: 'amount required' }), { status: 400, headers: { 'content-type': 'application/json' } });
        }
        const charge = await ctx!.phase('charge', async (tx) => {
          await tx.query('SELECT 1');
          return { id: 'ch_ok', amount: body.amount };
        });
        return new Response(JSON.stringify(charge), { status: 201, headers: { 'content-type': 'application/json' } });
      };

      it('a 400 returned before any phase is not stored and frees the key: the fixed retry with the same key runs', async () => {
        const { send, counter, count } = await setup();
        const bad = await send(validating, '/v1/charges', { key: 'fix-me', json: { amt: 1 } });
        assert.equal(bad.status, 400);
        assert.equal(counter.H, 1);
        assert.equal(await count(), 0, 'nothing stored, the claim is deleted');
        const again = await send(validating, '/v1/charges', { key: 'fix-me', json: { amt: 1 } });
        assert.equal(again.status, 400);
        assert.equal(again.headers.get('idempotent-replayed'), null);
        assert.equal(counter.H, 2, 'the same invalid request runs again, it is not replayed');
        const fixed = await send(validating, '/v1/charges', { key: 'fix-me', json: { amount: 7 } });
        assert.equal(fixed.status, 201);
        assert.deepEqual(await fixed.json(), { id: 'ch_ok', amount: 7 });
        assert.equal(counter.H, 3);
        assert.equal(await count(), 1);
      });

      it('ctx.reject() with a 409 is not stored and frees the key', async () => {
        const { send, counter, count } = await setup();
        let conflict = true;
        const handler: Handler = async (_req, ctx) => {
          if (conflict) {
            ctx!.reject();
            return new Response('{"error":"version conflict"}', { status: 409, headers: { 'content-type': 'application/json' } });
          }
          return new Response('{"ok":true}', { status: 201, headers: { 'content-type': 'application/json' } });
        };
        const first = await send(handler, '/v1/orders', { key: 'rej-1', json: { v: 1 } });
        assert.equal(first.status, 409);
        assert.equal(await first.text(), '{"error":"version conflict"}');
        assert.equal(await count(), 0);
        conflict = false;
        const retry = await send(handler, '/v1/orders', { key: 'rej-1', json: { v: 1 } });
        assert.equal(retry.status, 201);
        assert.equal(retry.headers.get('idempotent-replayed'), null);
        assert.equal(counter.H, 2);
        assert.equal(await count(), 1);
      });

      it('a 409 the handler returns without reject() is stored and replayed', async () => {
        const { send, counter } = await setup();
        const handler: Handler = () => new Response('{"error":"conflict"}', { status: 409, headers: { 'content-type': 'application/json' } });
        assert.equal((await send(handler, '/v1/orders', { key: 'own-409', json: {} })).status, 409);
        const replay = await send(handler, '/v1/orders', { key: 'own-409', json: {} });
        assert.equal(replay.status, 409);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(counter.H, 1);
      });

      it('a 400 returned after a phase committed is stored and replayed', async () => {
        const { send, counter, rows } = await setup();
        const handler: Handler = async (_req, ctx) => {
          await ctx!.phase('reserved', async () => ({ reserved: true }));
          ctx!.reject(); // has no effect once work started
          return new Response('{"error":"declined after reserve"}', { status: 400, headers: { 'content-type': 'application/json' } });
        };
        const first = await send(handler, '/v1/orders', { key: 'late-400', json: {} });
        assert.equal(first.status, 400);
        const [row] = await rows();
        assert.equal(row!.state, 'done');
        assert.equal(row!.response_status, 400);
        const replay = await send(handler, '/v1/orders', { key: 'late-400', json: {} });
        assert.equal(replay.status, 400);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.text(), '{"error":"declined after reserve"}');
        assert.equal(counter.H, 1);
      });
    });

    describe('thrown errors', () => {
      it('default onThrow release: a throw after a committed phase gives a 500 request-failed-retry problem; the retry resumes after that phase', async () => {
        const { send, counter, rows, errors } = await setup();
        const runs = { a: 0, b: 0 };
        let crash = true;
        const handler: Handler = async (_req, ctx) => {
          const a = await ctx!.phase('a', async (tx) => {
            runs.a++;
            await tx.query('SELECT 1');
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
          return new Response(JSON.stringify({ a, b, resumed: ctx!.resumed }), { status: 201, headers: { 'content-type': 'application/json' } });
        };
        const failed = await send(handler, '/v1/transfers', { key: 'crash-1', json: { amount: 1 } });
        const problem = await assertProblem(failed, 500, 'request-failed-retry');
        assert.match(String(problem.detail), /same idempotency key/i);
        assert.equal(errors.length, 1);
        const [row] = await rows();
        assert.equal(row!.state, 'started');
        assert.equal(row!.recovery_point, 'a');
        assert.equal(row!.locked, false, 'the lease was released');

        const retry = await send(handler, '/v1/transfers', { key: 'crash-1', json: { amount: 1 } });
        assert.equal(retry.status, 201);
        assert.deepEqual(await retry.json(), { a: { n: 1 }, b: 2, resumed: true });
        assert.deepEqual(runs, { a: 1, b: 1 }, 'phase a is not run again, b runs once');
        assert.equal(counter.H, 2);
        const replay = await send(handler, '/v1/transfers', { key: 'crash-1', json: { amount: 1 } });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(counter.H, 2);
      });

      it("onThrow: 'store' stores the 500 problem and replays it", async () => {
        const { send, counter, rows } = await setup({ onThrow: 'store' });
        const handler: Handler = async (_req, ctx) => {
          await ctx!.phase('a', async () => 1);
          throw new Error('boom');
        };
        const first = await send(handler, '/v1/transfers', { key: 'store-500', json: {} });
        const firstText = await first.clone().text();
        await assertProblem(first, 500, 'request-failed-retry');
        assert.equal((await rows())[0]!.state, 'done');
        const replay = await send(handler, '/v1/transfers', { key: 'store-500', json: {} });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.clone().text(), firstText);
        await assertProblem(replay, 500, 'request-failed-retry');
        assert.equal(counter.H, 1);
      });
    });

    describe('ctx.respond', () => {
      async function effectsTable(): Promise<string> {
        const name = tableName('idem_effects');
        await db.client.query(`CREATE TABLE "${name}" (id serial PRIMARY KEY, note text NOT NULL)`);
        drops.push(async () => void (await db.client.query(`DROP TABLE IF EXISTS "${name}"`)));
        return name;
      }

      it('commits the effect and the stored response together; the response sent equals the replay byte for byte', async () => {
        const { send, counter, rows } = await setup();
        const effects = await effectsTable();
        const handler: Handler = async (_req, ctx) =>
          ctx!.respond(async (tx) => {
            const { rows: inserted } = await tx.query(`INSERT INTO "${effects}" (note) VALUES ('paid') RETURNING id`);
            return new Response(JSON.stringify({ id: inserted[0]!.id, at: Math.random() }), {
              status: 201,
              headers: { 'content-type': 'application/json', location: `/v1/payments/${inserted[0]!.id}` },
            });
          });
        const first = await send(handler, '/v1/payments', { key: 'respond-1', json: { amount: 1 } });
        assert.equal(first.status, 201);
        const firstBytes = await bytes(first);
        const [row] = await rows();
        assert.equal(row!.state, 'done');
        assert.equal(row!.response_body, hex(firstBytes));
        assert.equal(await countRows(db.client, effects), 1);
        const replay = await send(handler, '/v1/payments', { key: 'respond-1', json: { amount: 1 } });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(replay.headers.get('location'), first.headers.get('location'));
        assert.equal(hex(await bytes(replay)), hex(firstBytes));
        assert.equal(counter.H, 1);
        assert.equal(await countRows(db.client, effects), 1);
      });

      it('when the finishing write is fenced (another worker took over), the effect rolls back with it', async () => {
        const { send, rows, table } = await setup();
        const effects = await effectsTable();
        let held: number | undefined;
        const handler: Handler = async (_req, ctx) =>
          ctx!.respond(async (tx) => {
            held = ctx!.execution.token;
            await tx.query(`INSERT INTO "${effects}" (note) VALUES ('paid')`);
            // Simulate a takeover racing this transaction: the token moves on.
            await tx.query(`UPDATE "${table}" SET lock_version = lock_version + 1`);
            return new Response('{"ok":true}', { status: 201, headers: { 'content-type': 'application/json' } });
          });
        const lost = await send(handler, '/v1/payments', { key: 'fenced-1', json: {} });
        await assertProblem(lost, 409, 'idempotency-lease-lost');
        assert.equal(await countRows(db.client, effects), 0, 'the effect was rolled back');
        const [row] = await rows();
        assert.equal(row!.state, 'started');
        assert.equal(row!.response_status, null);
        assert.ok(held !== undefined && held > 0, `the handler held a token (${held})`);
        assert.equal(row!.lock_version, String(held), 'the token bump in the same transaction rolled back too');
      });

      it('when the respond callback throws after its effect, neither the effect nor a response is stored; the retry runs', async () => {
        const { send, counter, rows } = await setup();
        const effects = await effectsTable();
        let crash = true;
        const handler: Handler = async (_req, ctx) =>
          ctx!.respond(async (tx) => {
            await tx.query(`INSERT INTO "${effects}" (note) VALUES ('paid')`);
            if (crash) {
              crash = false;
              throw new Error('after insert');
            }
            return new Response('{"ok":true}', { status: 201, headers: { 'content-type': 'application/json' } });
          });
        await assertProblem(await send(handler, '/v1/payments', { key: 'throw-1', json: {} }), 500, 'request-failed-retry');
        assert.equal(await countRows(db.client, effects), 0);
        assert.equal((await rows())[0]!.response_status, null);
        const retry = await send(handler, '/v1/payments', { key: 'throw-1', json: {} });
        assert.equal(retry.status, 201);
        assert.equal(counter.H, 2);
        assert.equal(await countRows(db.client, effects), 1);
      });
    });

    describe('retention', () => {
      it('after retention the same key runs fresh; replays do not extend retention', async () => {
        const { send, counter, count } = await setup({ retentionMs: 1500, leaseMs: 500, heartbeatMs: 0 });
        const started = Date.now();
        assert.equal((await send(created, '/v1/charges', { key: 'ret-1', json: {} })).status, 201);
        const early = await send(created, '/v1/charges', { key: 'ret-1', json: {} });
        assert.equal(early.headers.get('idempotent-replayed'), 'true');
        let replays = 1;
        const fresh = await poll(
          async () => {
            const res = await send(created, '/v1/charges', { key: 'ret-1', json: {} });
            if (res.headers.get('idempotent-replayed') === 'true') {
              replays++;
              return undefined;
            }
            return res;
          },
          4000,
          'the key to expire',
          100,
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
      it('every idem problem is application/problem+json with status = HTTP status and a distinct type per condition', async () => {
        const { send } = await setup({ required: true, leaseMs: 5000 });
        const types = new Map<string, number>();
        const record = async (res: Response, status: number, kind: string) => {
          const p = await assertProblem(res, status, kind);
          types.set(p.type, status);
        };
        await record(await send(created, '/v1/x', { json: {} }), 400, 'idempotency-key-missing');
        await record(await send(created, '/v1/x', { key: '', json: {} }), 400, 'idempotency-key-invalid');
        await send(created, '/v1/x', { key: 'p1', json: { a: 1 } });
        await record(await send(created, '/v1/x', { key: 'p1', json: { a: 2 } }), 422, 'idempotency-key-reused');
        const entered = deferred();
        const gate = deferred();
        const slow = send(async () => {
          entered.resolve();
          await gate.promise;
          return new Response(null, { status: 204 });
        }, '/v1/x', { key: 'p2' });
        await entered.promise;
        await record(await send(created, '/v1/x', { key: 'p2' }), 409, 'request-in-progress');
        gate.resolve();
        await slow;
        await record(await send(() => Promise.reject(new Error('x')), '/v1/x', { key: 'p3' }), 500, 'request-failed-retry');
        const down = unreachableStore();
        try {
          const offline = new HttpIdempotency({ store: down.store, required: true });
          await record(await offline.handle(request('/v1/x', { key: 'p4' }), () => new Response('ran')), 503, 'idempotency-store-unavailable');
        } finally {
          await down.close();
        }
        assert.equal(types.size, 6, `distinct types: ${[...types.keys()].join(', ')}`);
      });

      it('problems.stripe adds error {type, code, message}; problems.docsUrl adds Link rel="describedby"', async () => {
        const docsUrl = 'https://docs.example.com/errors/idempotency';
        const { send } = await setup({ required: true, problems: { stripe: true, docsUrl } });
        const missing = await send(created, '/v1/x', { json: {} });
        assert.equal(missing.headers.get('link'), `<${docsUrl}>; rel="describedby"`);
        const body = await assertProblem(missing, 400, 'idempotency-key-missing');
        const error = body.error as { type: string; code: string; message: string };
        assert.equal(error.type, 'invalid_request_error');
        assert.equal(error.code, 'idempotency_key_missing');
        assert.equal(error.message, body.detail);
        await send(created, '/v1/x', { key: 's1', json: { a: 1 } });
        const reused = await send(created, '/v1/x', { key: 's1', json: { a: 2 } });
        assert.equal(reused.headers.get('link'), `<${docsUrl}>; rel="describedby"`);
        const reusedBody = await assertProblem(reused, 422, 'idempotency-key-reused');
        assert.deepEqual(Object.keys(reusedBody.error as object).sort(), ['code', 'message', 'type']);
        assert.equal((reusedBody.error as { type: string }).type, 'idempotency_error');
      });

      it('without the stripe option there is no error member and no Link', async () => {
        const { send } = await setup({ required: true });
        const res = await send(created, '/v1/x', { json: {} });
        assert.equal(res.headers.get('link'), null);
        const body = await assertProblem(res, 400, 'idempotency-key-missing');
        assert.equal(body.error, undefined);
      });
    });
  });
}

describe('HTTP core with an unreachable store', () => {
  it('answers a 503 idempotency-store-unavailable problem and does not run the handler (fail closed)', async () => {
    const down = unreachableStore();
    try {
      const idem = new HttpIdempotency({ store: down.store });
      let H = 0;
      const res = await idem.handle(request('/v1/charges', { key: 'k-down', json: { amount: 1 } }), () => {
        H++;
        return new Response('ran', { status: 201 });
      });
      assert.equal(res.headers.get('retry-after'), '1');
      await assertProblem(res, 503, 'idempotency-store-unavailable');
      assert.equal(H, 0);
    } finally {
      await down.close();
    }
  });
});
