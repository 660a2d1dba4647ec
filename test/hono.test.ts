/**
 * The Hono adapter on a real Hono app (`app.request()`), and over a real HTTP server
 * (`@hono/node-server`) with real fetch connections for the concurrency test. Real databases:
 * PGlite always, PostgreSQL when DATABASE_URL is set. H counts how many times the handler ran.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { Hono, type Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { setCookie } from 'hono/cookie';
import { serve } from '@hono/node-server';
import { idempotency, type IdempotencyVariables } from '../src/hono/index.js';
import type { IdempotencyOptions } from '../src/http/idempotency.js';
import type { Queryable, SqlClient } from '../src/postgres/client.js';
import { engines, freshStore, tableName } from './helpers/engines.js';
import { assertProblem, countRows, deferred, hex, INVALID_KEYS, keyRows, poll, tableText, unreachableStore } from './helpers/http.js';

type Env = { Variables: IdempotencyVariables<Queryable> };
type C = Context<Env>;

interface Send {
  method?: string;
  key?: string;
  json?: unknown;
  body?: string | Uint8Array;
  headers?: Record<string, string>;
}

function init(send: Send): RequestInit {
  const headers = new Headers(send.headers);
  if (send.key !== undefined) headers.set('Idempotency-Key', send.key);
  let body: string | Uint8Array | undefined = send.body;
  if (send.json !== undefined) {
    body = JSON.stringify(send.json);
    headers.set('content-type', 'application/json');
  }
  return { method: send.method ?? 'POST', headers, body: body ?? null };
}

const bytes = async (response: Response): Promise<Uint8Array> => new Uint8Array(await response.arrayBuffer());

/** A quiet error handler with Hono's default behaviour (HTTPException → its response, else 500). */
function quietErrors(app: Hono<Env>): void {
  app.onError((error, c) => (error instanceof HTTPException ? error.getResponse() : c.text('Internal Server Error', 500)));
}

/** Runs `fn` against `app` served by @hono/node-server on an ephemeral port, then closes it. */
async function withServer(app: Hono<Env>, fn: (base: string) => Promise<void>): Promise<void> {
  let server!: Server;
  const info = await new Promise<AddressInfo>((resolve) => {
    server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, resolve) as Server;
  });
  try {
    await fn(`http://127.0.0.1:${info.port}`);
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
}

for (const engine of engines) {
  describe(`Hono adapter over ${engine.name}`, () => {
    let db: { client: SqlClient; close(): Promise<void> };
    const drops: Array<() => Promise<void>> = [];
    before(async () => {
      db = await engine.open();
    });
    after(async () => {
      for (const drop of drops) await drop().catch(() => undefined);
      await db.close();
    });

    /** A Hono app whose idempotency middleware uses a fresh table; `H` counts handler runs. */
    async function setup(options: Partial<IdempotencyOptions<Queryable>> = {}) {
      const { store, table, drop } = await freshStore(db.client);
      drops.push(drop);
      const app = new Hono<Env>();
      quietErrors(app);
      const errors: unknown[] = [];
      const idem = idempotency<Queryable>({ store, onHandlerError: (e) => errors.push(e), ...options });
      const counter = { H: 0 };
      const counted =
        (handler: (c: C) => Response | Promise<Response>) =>
        (c: C): Response | Promise<Response> => {
          counter.H++;
          return handler(c);
        };
      const send = (path: string, s: Send = {}) => app.request(path, init(s));
      return { app, idem, table, counter, errors, counted, send, rows: () => keyRows(db.client, table), count: () => countRows(db.client, table) };
    }

    /** 201 JSON with allow-listed headers, a cookie and a request id. */
    const created = async (c: C) => {
      const body = c.req.header('content-type') ? await c.req.json() : null;
      setCookie(c, 'session', 's3cr3t', { httpOnly: true });
      c.header('x-request-id', `req-${Math.random()}`);
      c.header('location', '/v1/charges/ch_1');
      c.header('etag', '"v1"');
      return c.json({ id: 'ch_1', body, at: Math.random() }, 201);
    };

    describe('which requests are protected', () => {
      it('GET, PUT and DELETE with a key pass through unprotected: the handler runs every time, no row is written', async () => {
        const { app, idem, counted, send, counter, count } = await setup({ required: true });
        const seen: unknown[] = [];
        const h = counted((c) => {
          seen.push(c.get('idem'));
          return c.text('ok');
        });
        app.get('/v1/things/:id', idem, h);
        app.put('/v1/things/:id', idem, h);
        app.delete('/v1/things/:id', idem, h);
        for (const method of ['GET', 'PUT', 'DELETE', 'GET', 'PUT', 'DELETE']) {
          const res = await send('/v1/things/1', { method, key: 'same-key' });
          assert.equal(res.status, 200, method);
          assert.equal(res.headers.get('idempotent-replayed'), null);
        }
        assert.equal(counter.H, 6);
        assert.deepEqual(seen, Array(6).fill(undefined));
        assert.equal(await count(), 0);
      });

      it('a POST without a key passes through when not required; with required: true it gets a 400 problem, H=0, nothing stored', async () => {
        const open = await setup();
        open.app.post('/v1/charges', open.idem, open.counted(async (c) => c.json(await c.req.json(), 201)));
        const a = await open.send('/v1/charges', { json: { amount: 1 } });
        const b = await open.send('/v1/charges', { json: { amount: 1 } });
        assert.equal(a.status, 201);
        assert.deepEqual(await a.json(), { amount: 1 }, 'the handler still reads the body');
        assert.equal(b.headers.get('idempotent-replayed'), null);
        assert.equal(open.counter.H, 2);
        assert.equal(await open.count(), 0);

        const strict = await setup({ required: true });
        strict.app.post('/v1/charges', strict.idem, strict.counted(created));
        await assertProblem(await strict.send('/v1/charges', { json: { amount: 1 } }), 400, 'idempotency-key-missing');
        assert.equal(strict.counter.H, 0);
        assert.equal(await strict.count(), 0);
      });
    });

    describe('the key', () => {
      for (const [name, value] of [...INVALID_KEYS, ['a key with a control character (0x01)', 'a\x01b'] as [string, string]]) {
        it(`${name} gets a 400 idempotency-key-invalid problem, H=0, no row`, async () => {
          const { app, idem, counted, send, counter, count } = await setup();
          app.post('/v1/charges', idem, counted(created));
          await assertProblem(await send('/v1/charges', { key: value, json: { amount: 1 } }), 400, 'idempotency-key-invalid');
          assert.equal(counter.H, 0);
          assert.equal(await count(), 0);
        });
      }

      it('the sf-string "k1" and the bare token k1 are the same key: the second is a replay', async () => {
        const { app, idem, counted, send, counter, rows } = await setup();
        app.post('/v1/charges', idem, counted(created));
        const first = await send('/v1/charges', { key: '"k1"', json: { amount: 5 } });
        const second = await send('/v1/charges', { key: 'k1', json: { amount: 5 } });
        assert.equal(second.status, 201);
        assert.equal(second.headers.get('idempotent-replayed'), 'true');
        assert.equal(hex(await bytes(second)), hex(await bytes(first)));
        assert.equal(counter.H, 1);
        assert.deepEqual((await rows()).map((r) => r.key), ['k1']);
      });
    });

    describe('first execution and replay', () => {
      it('a retry gets the same status, byte-identical body, content-type/location/etag and Idempotent-Replayed: true; never Set-Cookie or x-request-id', async () => {
        const { app, idem, counted, send, counter } = await setup();
        app.post('/v1/charges', idem, counted(created));
        const first = await send('/v1/charges', { key: 'replay-1', json: { amount: 100 } });
        assert.equal(first.status, 201);
        assert.equal(first.headers.get('idempotent-replayed'), null);
        assert.match(first.headers.getSetCookie()[0] ?? '', /^session=s3cr3t/);
        assert.match(first.headers.get('x-request-id') ?? '', /^req-/);
        const firstBody = await bytes(first);
        const replay = await send('/v1/charges', { key: 'replay-1', json: { amount: 100 } });
        assert.equal(replay.status, 201);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(hex(await bytes(replay)), hex(firstBody));
        for (const name of ['content-type', 'location', 'etag']) {
          assert.ok(first.headers.get(name), name);
          assert.equal(replay.headers.get(name), first.headers.get(name), name);
        }
        assert.deepEqual(replay.headers.getSetCookie(), []);
        assert.equal(replay.headers.get('x-request-id'), null);
        assert.equal(counter.H, 1);
      });

      it('a binary body with 0x00 and 0xff bytes and an empty 204 round-trip exactly', async () => {
        const { app, idem, counted, send, counter } = await setup();
        const payload = new Uint8Array([0x00, 0xff, 0x00, 0x80, 0x7f, 0x0d, 0x0a, 0xfe]);
        app.post(
          '/v1/blobs',
          idem,
          counted(async (c) => {
            const got = new Uint8Array(await c.req.arrayBuffer());
            return c.body(new Uint8Array([0xff, ...got, 0x00]), 201, { 'content-type': 'application/octet-stream' });
          }),
        );
        app.post('/v1/things/:id/archive', idem, counted((c) => c.body(null, 204)));
        const opts = { key: 'bin-1', body: payload, headers: { 'content-type': 'application/octet-stream' } };
        const first = await bytes(await send('/v1/blobs', opts));
        assert.equal(hex(first), 'ff' + hex(payload) + '00');
        const replay = await send('/v1/blobs', opts);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(replay.headers.get('content-type'), 'application/octet-stream');
        assert.equal(hex(await bytes(replay)), hex(first));

        const empty = await send('/v1/things/1/archive', { key: 'nc-1' });
        assert.equal(empty.status, 204);
        assert.equal((await bytes(empty)).length, 0);
        const emptyReplay = await send('/v1/things/1/archive', { key: 'nc-1' });
        assert.equal(emptyReplay.status, 204);
        assert.equal(emptyReplay.headers.get('idempotent-replayed'), 'true');
        assert.equal((await bytes(emptyReplay)).length, 0);
        assert.equal(counter.H, 2);
      });

      it('a returned 402 and a returned 500 are stored and replayed (H=1 each)', async () => {
        const { app, idem, counted, send, counter, rows } = await setup();
        app.post('/v1/charges', idem, counted((c) => c.json({ error: { code: 'card_declined' } }, 402)));
        app.post('/v1/reports', idem, counted((c) => c.text('upstream said no', 500)));
        for (const [path, status] of [['/v1/charges', 402], ['/v1/reports', 500]] as const) {
          const first = await send(path, { key: `s-${status}`, json: {} });
          assert.equal(first.status, status);
          const text = await first.text();
          const replay = await send(path, { key: `s-${status}`, json: {} });
          assert.equal(replay.status, status);
          assert.equal(replay.headers.get('idempotent-replayed'), 'true');
          assert.equal(await replay.text(), text);
        }
        assert.equal(counter.H, 2);
        assert.deepEqual((await rows()).map((r) => r.response_status).sort(), [402, 500]);
      });
    });

    describe('same key, different request', () => {
      it('reordered JSON keys replay; a different body, path, query or method gets 422 and the original still replays', async () => {
        const { app, idem, counted, send, counter, rows } = await setup();
        app.post('/v1/charges', idem, counted(created));
        app.patch('/v1/charges', idem, counted(created));
        app.post('/v1/refunds', idem, counted(created));
        const json = { 'content-type': 'application/json' };
        const first = await send('/v1/charges?expand=a', { key: 'r1', body: '{"amount":1,"currency":"eur"}', headers: json });
        assert.equal(first.status, 201);
        const firstText = await first.text();
        const reordered = await send('/v1/charges?expand=a', { key: 'r1', body: '{"currency":"eur","amount":1.0}', headers: json });
        assert.equal(reordered.headers.get('idempotent-replayed'), 'true');
        assert.equal(await reordered.text(), firstText);
        const rowBefore = await rows();
        for (const [what, path, s] of [
          ['body', '/v1/charges?expand=a', { body: '{"amount":2,"currency":"eur"}' }],
          ['path', '/v1/refunds?expand=a', { body: '{"amount":1,"currency":"eur"}' }],
          ['query', '/v1/charges?expand=b', { body: '{"amount":1,"currency":"eur"}' }],
          ['method', '/v1/charges?expand=a', { method: 'PATCH', body: '{"amount":1,"currency":"eur"}' }],
        ] as Array<[string, string, Send]>) {
          const res = await send(path, { ...s, key: 'r1', headers: json });
          assert.equal(res.status, 422, what);
          await assertProblem(res, 422, 'idempotency-key-reused');
        }
        assert.deepEqual(await rows(), rowBefore, 'the stored row is untouched');
        const replay = await send('/v1/charges?expand=a', { key: 'r1', body: '{"amount":1,"currency":"eur"}', headers: json });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.text(), firstText);
        assert.equal(counter.H, 1);
      });

      it('mismatchStatus: 409 answers a reused key with 409', async () => {
        const { app, idem, counted, send, counter } = await setup({ mismatchStatus: 409 });
        app.post('/v1/charges', idem, counted(created));
        assert.equal((await send('/v1/charges', { key: 'm', json: { a: 1 } })).status, 201);
        await assertProblem(await send('/v1/charges', { key: 'm', json: { a: 2 } }), 409, 'idempotency-key-reused');
        assert.equal(counter.H, 1);
      });
    });

    describe('while the first request is running', () => {
      it('a different body gets 422 (not 409); the same request gets 409 request-in-progress with Retry-After in [1, ceil(lease/1000)]', async () => {
        const leaseMs = 4000;
        const { app, idem, counted, send, counter } = await setup({ leaseMs });
        const entered = deferred();
        const gate = deferred();
        app.post(
          '/v1/charges',
          idem,
          counted(async (c) => {
            entered.resolve();
            await gate.promise;
            return created(c);
          }),
        );
        const first = send('/v1/charges', { key: 'busy', json: { amount: 1 } });
        await entered.promise;
        await assertProblem(await send('/v1/charges', { key: 'busy', json: { amount: 2 } }), 422, 'idempotency-key-reused');
        const busy = await send('/v1/charges', { key: 'busy', json: { amount: 1 } });
        const retryAfter = busy.headers.get('retry-after') ?? '';
        await assertProblem(busy, 409, 'request-in-progress');
        assert.match(retryAfter, /^\d+$/);
        assert.ok(Number(retryAfter) >= 1 && Number(retryAfter) <= Math.ceil(leaseMs / 1000), `Retry-After ${retryAfter}`);
        gate.resolve();
        assert.equal((await first).status, 201);
        assert.equal((await send('/v1/charges', { key: 'busy', json: { amount: 1 } })).headers.get('idempotent-replayed'), 'true');
        assert.equal(counter.H, 1);
      });

      it('50 parallel identical requests over a real HTTP server: H=1, one row, every answer a 201 (original or replay) or a 409', async () => {
        const { app, idem, counted, counter, count } = await setup();
        app.post(
          '/v1/charges',
          idem,
          counted(async (c) => {
            const body = await c.req.json();
            const charge = await c.get('idem')!.phase('charge', async (tx) => {
              await tx.query('SELECT 1');
              return { id: 'ch_parallel', body };
            });
            await new Promise((r) => setTimeout(r, 150));
            return c.json(charge, 201);
          }),
        );
        await withServer(app, async (base) => {
          const url = `${base}/v1/charges`;
          const responses = await Promise.all(
            Array.from({ length: 50 }, () =>
              fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': 'parallel-1' }, body: '{"amount":42}' }),
            ),
          );
          const results = await Promise.all(responses.map(async (r) => ({ status: r.status, replayed: r.headers.get('idempotent-replayed'), type: r.headers.get('content-type'), text: await r.text() })));
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
    });

    describe('client disconnects', () => {
      it('a client disconnecting mid-work over a real HTTP server does not cancel the work or the write of its result', async () => {
        const { app, idem, counted, counter, rows } = await setup();
        const entered = deferred();
        const gate = deferred();
        app.post(
          '/v1/charges',
          idem,
          counted(async (c) => {
            entered.resolve();
            await gate.promise;
            const charge = await c.get('idem')!.phase('charge', async () => ({ id: 'ch_disc' }));
            return c.json(charge, 201);
          }),
        );
        await withServer(app, async (base) => {
          const abort = new AbortController();
          const init1 = { ...init({ key: 'disc', json: { amount: 1 } }), signal: abort.signal };
          const gone = fetch(base + '/v1/charges', init1).then(
            () => 'answered',
            () => 'aborted',
          );
          await entered.promise;
          abort.abort();
          assert.equal(await gone, 'aborted');
          gate.resolve();
          const row = await poll(async () => (await rows()).find((r) => r.state === 'done'), 3000, 'the result to be stored');
          assert.equal(row.response_status, 201);
          const retry = await fetch(base + '/v1/charges', init({ key: 'disc', json: { amount: 1 } }));
          assert.equal(retry.status, 201);
          assert.equal(retry.headers.get('idempotent-replayed'), 'true');
          assert.deepEqual(await retry.json(), { id: 'ch_disc' });
        });
        assert.equal(counter.H, 1);
      });
    });

    describe('scope', () => {
      it('two Authorization credentials with the same key and body each run once; the raw credential is never stored', async () => {
        const { app, idem, counted, send, counter, rows, table } = await setup();
        app.post('/v1/charges', idem, counted((c) => c.json({ owner: c.req.header('authorization') }, 201)));
        const a = await send('/v1/charges', { key: 'shared', json: { x: 1 }, headers: { authorization: 'Bearer sk_secret_tenant_a' } });
        const b = await send('/v1/charges', { key: 'shared', json: { x: 1 }, headers: { authorization: 'Bearer sk_secret_tenant_b' } });
        assert.deepEqual(await a.json(), { owner: 'Bearer sk_secret_tenant_a' });
        assert.deepEqual(await b.json(), { owner: 'Bearer sk_secret_tenant_b' });
        assert.equal(b.headers.get('idempotent-replayed'), null);
        const ra = await send('/v1/charges', { key: 'shared', json: { x: 1 }, headers: { authorization: 'Bearer sk_secret_tenant_a' } });
        assert.equal(ra.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(await ra.json(), { owner: 'Bearer sk_secret_tenant_a' });
        assert.equal(counter.H, 2);
        const hash = (s: string) => 'auth:' + createHash('sha256').update(s).digest('base64url');
        assert.deepEqual((await rows()).map((r) => r.scope).sort(), [hash('Bearer sk_secret_tenant_a'), hash('Bearer sk_secret_tenant_b')].sort());
        assert.ok(!(await tableText(db.client, table)).includes('sk_secret_tenant'), 'no credential in the table');
      });

      it('a custom scope resolver decides the scope', async () => {
        const { app, idem, counted, send, counter, rows } = await setup({ scope: (req) => `tenant:${req.headers.get('x-tenant')}` });
        app.post('/v1/charges', idem, counted(created));
        await send('/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't1', authorization: 'Bearer one' } });
        const rotated = await send('/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't1', authorization: 'Bearer two' } });
        assert.equal(rotated.headers.get('idempotent-replayed'), 'true');
        const other = await send('/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't2', authorization: 'Bearer one' } });
        assert.equal(other.headers.get('idempotent-replayed'), null);
        assert.equal(counter.H, 2);
        assert.deepEqual((await rows()).map((r) => r.scope), ['tenant:t1', 'tenant:t2']);
      });
    });

    describe('what gets stored', () => {
      it('a 400 returned before any phase is not stored; the fixed retry with the same key runs', async () => {
        const { app, idem, counted, send, counter, count } = await setup();
        app.post(
          '/v1/charges',
          idem,
          counted(async (c) => {
            const body = await c.req.json<{ amount?: unknown }>();
            if (typeof body.amount !== 'number') return c.json({ error: 'amount required' }, 400);
            const charge = await c.get('idem')!.phase('charge', async () => ({ amount: body.amount }));
            return c.json(charge, 201);
          }),
        );
        assert.equal((await send('/v1/charges', { key: 'fix', json: {} })).status, 400);
        assert.equal(await count(), 0);
        const fixed = await send('/v1/charges', { key: 'fix', json: { amount: 3 } });
        assert.equal(fixed.status, 201);
        assert.equal(fixed.headers.get('idempotent-replayed'), null);
        assert.deepEqual(await fixed.json(), { amount: 3 });
        assert.equal(counter.H, 2);
        assert.equal(await count(), 1);
      });

      it('ctx.reject() with a 409 is not stored and frees the key; a 400 after a committed phase is stored', async () => {
        const { app, idem, counted, send, counter, count, rows } = await setup();
        let conflict = true;
        app.post(
          '/v1/orders',
          idem,
          counted((c) => {
            if (conflict) {
              c.get('idem')!.reject();
              return c.json({ error: 'version conflict' }, 409);
            }
            return c.json({ ok: true }, 201);
          }),
        );
        app.post(
          '/v1/late',
          idem,
          counted(async (c) => {
            await c.get('idem')!.phase('reserved', async () => true);
            return c.json({ error: 'declined after reserve' }, 400);
          }),
        );
        assert.equal((await send('/v1/orders', { key: 'rej', json: {} })).status, 409);
        assert.equal(await count(), 0);
        conflict = false;
        const retry = await send('/v1/orders', { key: 'rej', json: {} });
        assert.equal(retry.status, 201);
        assert.equal(counter.H, 2);

        assert.equal((await send('/v1/late', { key: 'late', json: {} })).status, 400);
        const replay = await send('/v1/late', { key: 'late', json: {} });
        assert.equal(replay.status, 400);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(counter.H, 3);
        assert.deepEqual((await rows()).map((r) => [r.key, r.state, r.response_status]), [['late', 'done', 400], ['rej', 'done', 201]]);
      });

      it('a thrown HTTPException(400) counts as a returned 400: not stored, the key is freed', async () => {
        const { app, idem, counted, send, counter, count, errors } = await setup();
        app.post(
          '/v1/charges',
          idem,
          counted(async (c) => {
            const body = await c.req.json<{ amount?: unknown }>();
            if (typeof body.amount !== 'number') throw new HTTPException(400, { message: 'amount required' });
            return c.json({ amount: body.amount }, 201);
          }),
        );
        const bad = await send('/v1/charges', { key: 'hx', json: {} });
        assert.equal(bad.status, 400);
        assert.equal(await bad.text(), 'amount required');
        assert.equal(bad.headers.get('content-type')?.startsWith('application/problem+json'), false, 'the app’s own 400, not an idem problem');
        assert.equal(await count(), 0);
        assert.equal(errors.length, 0, 'not treated as a crash');
        const fixed = await send('/v1/charges', { key: 'hx', json: { amount: 9 } });
        assert.equal(fixed.status, 201);
        assert.equal(counter.H, 2);
        assert.equal(await count(), 1);
      });
    });

    describe('thrown errors', () => {
      it('default onThrow release: 500 request-failed-retry; the retry resumes after the committed phase', async () => {
        const { app, idem, counted, send, counter, rows, errors } = await setup();
        const runs = { a: 0, b: 0 };
        let crash = true;
        app.post(
          '/v1/transfers',
          idem,
          counted(async (c) => {
            const x = c.get('idem')!;
            const a = await x.phase('a', async (tx) => {
              runs.a++;
              await tx.query('SELECT 1');
              return 'A';
            });
            if (crash) {
              crash = false;
              throw new Error('crash mid-work');
            }
            const b = await x.phase('b', async () => {
              runs.b++;
              return 'B';
            });
            return c.json({ a, b, resumed: x.resumed }, 201);
          }),
        );
        await assertProblem(await send('/v1/transfers', { key: 't1', json: {} }), 500, 'request-failed-retry');
        assert.equal(errors.length, 1);
        const [row] = await rows();
        assert.deepEqual([row!.state, row!.recovery_point, row!.locked], ['started', 'a', false]);
        const retry = await send('/v1/transfers', { key: 't1', json: {} });
        assert.equal(retry.status, 201);
        assert.deepEqual(await retry.json(), { a: 'A', b: 'B', resumed: true });
        assert.deepEqual(runs, { a: 1, b: 1 });
        assert.equal(counter.H, 2);
      });

      it('a handler throwing a non-Error value (a string, rethrown by Hono) releases the key with a 500 problem; the retry resumes', async () => {
        const { app, idem, counted, send, counter, rows, errors } = await setup();
        const runs = { a: 0, b: 0 };
        let attempt = 0;
        app.post(
          '/v1/transfers',
          idem,
          counted(async (c) => {
            const x = c.get('idem')!;
            attempt++;
            if (attempt === 1) throw 'boom before any phase';
            const a = await x.phase('a', async () => {
              runs.a++;
              return 'A';
            });
            if (attempt === 2) throw 'boom after phase a';
            const b = await x.phase('b', async () => {
              runs.b++;
              return 'B';
            });
            return c.json({ a, b, resumed: x.resumed }, 201);
          }),
        );
        // Nothing committed: the key is released and the retry starts over.
        await assertProblem(await send('/v1/transfers', { key: 't-str', json: {} }), 500, 'request-failed-retry');
        assert.deepEqual(errors, ['boom before any phase'], 'onHandlerError got the thrown value');
        let [row] = await rows();
        assert.deepEqual([row!.state, row!.recovery_point, row!.locked], ['started', 'start', false], 'released at once');
        // Phase a committed, then a string is thrown: released with its recovery point.
        await assertProblem(await send('/v1/transfers', { key: 't-str', json: {} }), 500, 'request-failed-retry');
        assert.deepEqual(errors, ['boom before any phase', 'boom after phase a']);
        [row] = await rows();
        assert.deepEqual([row!.state, row!.recovery_point, row!.locked], ['started', 'a', false], 'released at once');
        const retry = await send('/v1/transfers', { key: 't-str', json: {} });
        assert.equal(retry.status, 201);
        assert.deepEqual(await retry.json(), { a: 'A', b: 'B', resumed: true });
        assert.deepEqual(runs, { a: 1, b: 1 }, 'phase a ran once');
        assert.equal(counter.H, 3);
        const replay = await send('/v1/transfers', { key: 't-str', json: {} });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(counter.H, 3);
      });

      it("onThrow: 'store' stores the 500 problem and replays it", async () => {
        const { app, idem, counted, send, counter } = await setup({ onThrow: 'store' });
        app.post(
          '/v1/transfers',
          idem,
          counted(async () => {
            throw new Error('boom');
          }),
        );
        const first = await send('/v1/transfers', { key: 't2', json: {} });
        const text = await first.clone().text();
        await assertProblem(first, 500, 'request-failed-retry');
        const replay = await send('/v1/transfers', { key: 't2', json: {} });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.clone().text(), text);
        await assertProblem(replay, 500, 'request-failed-retry');
        assert.equal(counter.H, 1);
      });
    });

    describe('ctx.respond', () => {
      it('commits the effect with the stored response; the response sent equals the replay byte for byte', async () => {
        const { app, idem, counted, send, counter, rows } = await setup();
        const effects = tableName('idem_effects');
        await db.client.query(`CREATE TABLE "${effects}" (id serial PRIMARY KEY, note text NOT NULL)`);
        drops.push(async () => void (await db.client.query(`DROP TABLE IF EXISTS "${effects}"`)));
        app.post(
          '/v1/payments',
          idem,
          counted(async (c) =>
            c.get('idem')!.respond(async (tx) => {
              const { rows: r } = await tx.query(`INSERT INTO "${effects}" (note) VALUES ('paid') RETURNING id`);
              c.header('location', `/v1/payments/${r[0]!.id}`);
              return c.json({ id: r[0]!.id, nonce: Math.random() }, 201);
            }),
          ),
        );
        const first = await send('/v1/payments', { key: 'pay-1', json: { amount: 1 } });
        assert.equal(first.status, 201);
        const firstBytes = await bytes(first);
        const [row] = await rows();
        assert.equal(row!.state, 'done');
        assert.equal(row!.response_body, hex(firstBytes), 'the stored body is what was sent');
        assert.equal(await countRows(db.client, effects), 1);
        const replay = await send('/v1/payments', { key: 'pay-1', json: { amount: 1 } });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(replay.headers.get('location'), first.headers.get('location'));
        assert.equal(hex(await bytes(replay)), hex(firstBytes));
        assert.equal(counter.H, 1);
        assert.equal(await countRows(db.client, effects), 1);
      });
    });

    describe('retention', () => {
      it('after retention the same key runs fresh (H=2); replays do not extend it', async () => {
        const { app, idem, counted, send, counter, count } = await setup({ retentionMs: 1500, leaseMs: 500, heartbeatMs: 0 });
        app.post('/v1/charges', idem, counted(created));
        const started = Date.now();
        assert.equal((await send('/v1/charges', { key: 'ret', json: {} })).status, 201);
        assert.equal((await send('/v1/charges', { key: 'ret', json: {} })).headers.get('idempotent-replayed'), 'true');
        const fresh = await poll(
          async () => {
            const res = await send('/v1/charges', { key: 'ret', json: {} });
            return res.headers.get('idempotent-replayed') === 'true' ? undefined : res;
          },
          4000,
          'the key to expire',
          100,
        );
        assert.equal(fresh.status, 201);
        assert.ok(Date.now() - started >= 1000, 'not expired before retention');
        assert.equal(counter.H, 2);
        assert.equal(await count(), 1);
      });
    });

    describe('problem details', () => {
      it('problems.stripe adds error {type, code, message}; problems.docsUrl adds Link rel="describedby"', async () => {
        const docsUrl = 'https://docs.example.com/idempotency';
        const { app, idem, counted, send } = await setup({ required: true, problems: { stripe: true, docsUrl } });
        app.post('/v1/charges', idem, counted(created));
        const res = await send('/v1/charges', { key: 'x'.repeat(300), json: {} });
        assert.equal(res.headers.get('link'), `<${docsUrl}>; rel="describedby"`);
        const body = await assertProblem(res, 400, 'idempotency-key-invalid');
        assert.deepEqual(body.error, { type: 'invalid_request_error', code: 'idempotency_key_invalid', message: body.detail });
      });
    });
  });
}

describe('Hono adapter with an unreachable store', () => {
  it('answers a 503 idempotency-store-unavailable problem and does not run the handler', async () => {
    const down = unreachableStore();
    try {
      const app = new Hono<Env>();
      let H = 0;
      app.post('/v1/charges', idempotency({ store: down.store }), (c) => {
        H++;
        return c.text('ran', 201);
      });
      const res = await app.request('/v1/charges', init({ key: 'down', json: { amount: 1 } }));
      await assertProblem(res, 503, 'idempotency-store-unavailable');
      assert.equal(H, 0);
    } finally {
      await down.close();
    }
  });
});
