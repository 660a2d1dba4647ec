/**
 * The Express adapter on a real Express 5 app listening on port 0, driven by real fetch
 * connections (and node:http for two header lines). Real databases: PGlite always,
 * PostgreSQL when DATABASE_URL is set. H counts how many times the handler ran.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type ErrorRequestHandler, type Express, type RequestHandler, type Response as ExpressResponse } from 'express';
import { idempotency, type ExpressIdempotency } from '../src/express/index.js';
import type { IdempotencyContext } from '../src/http/context.js';
import type { IdempotencyOptions } from '../src/http/idempotency.js';
import type { Queryable, SqlClient } from '../src/postgres/client.js';
import { engines, freshStore } from './helpers/engines.js';
import { assertProblem, countRows, deferred, hex, INVALID_KEYS, keyRows, poll, tableText, unreachableStore } from './helpers/http.js';

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
const ctxOf = (res: ExpressResponse) => res.locals.idem as IdempotencyContext<Queryable>;

/** Starts `app` on an ephemeral port. */
async function listen(app: Express): Promise<{ url: string; close(): Promise<void> }> {
  const server = await new Promise<http.Server>((resolve, reject) => {
    const s = app.listen(0, '127.0.0.1', (error?: Error) => (error ? reject(error) : resolve(s)));
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A POST with two separate Idempotency-Key header lines, over a real socket. */
function postWithTwoKeyLines(url: string, keys: [string, string], body: string): Promise<{ status: number; type: string | undefined; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'POST', headers: { 'content-type': 'application/json', 'Idempotency-Key': keys, connection: 'close' } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'], text: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * A POST over a raw socket that tolerates a response cut short: resolves with what arrived
 * (`complete` false when the connection closed early) instead of failing.
 */
function rawPost(url: string, headers: Record<string, string>, body: string): Promise<{ status: number; complete: boolean; text: string }> {
  return new Promise((resolve) => {
    let status = 0;
    const chunks: Buffer[] = [];
    const done = (complete: boolean) => resolve({ status, complete, text: Buffer.concat(chunks).toString('utf8') });
    const req = http.request(url, { method: 'POST', headers: { 'content-type': 'application/json', connection: 'close', ...headers } }, (res) => {
      status = res.statusCode ?? 0;
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => done(res.complete));
      res.on('error', () => done(false));
      res.on('aborted', () => done(false));
    });
    req.on('error', () => done(false));
    req.end(body);
  });
}

/** A final error handler that keeps the test output quiet. */
const lastResort: ErrorRequestHandler = (_error, _req, res, _next) => {
  if (res.headersSent) return void res.end(); // too late to answer: finish quietly
  res.status(599).send('reached the app error handler');
};

for (const engine of engines) {
  describe(`Express adapter over ${engine.name}`, () => {
    let db: { client: SqlClient; close(): Promise<void> };
    const cleanups: Array<() => Promise<void>> = [];
    before(async () => {
      db = await engine.open();
    });
    after(async () => {
      for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
      await db.close();
    });

    /**
     * An Express app with a fresh table. Register routes on `app`, then `start()`: it mounts
     * `idem.onError` after the routes and listens. `parser: false` leaves out express.json().
     */
    async function setup(options: Partial<IdempotencyOptions<Queryable>> = {}, { parser = true } = {}) {
      const { store, table, drop } = await freshStore(db.client);
      cleanups.push(drop);
      const app = express();
      if (parser) app.use(express.json());
      const errors: unknown[] = [];
      const idem: ExpressIdempotency<Queryable> = idempotency<Queryable>({ store, onHandlerError: (e) => errors.push(e), ...options });
      const counter = { H: 0 };
      const counted =
        (handler: RequestHandler): RequestHandler =>
        (req, res, next) => {
          counter.H++;
          return handler(req, res, next);
        };
      let url = '';
      const start = async () => {
        app.use(idem.onError);
        app.use(lastResort);
        const server = await listen(app);
        cleanups.push(server.close);
        url = server.url;
        return server.url;
      };
      const send = (path: string, s: Send = {}) => fetch(url + path, init(s));
      return { app, idem, table, counter, errors, counted, start, send, rows: () => keyRows(db.client, table), count: () => countRows(db.client, table) };
    }

    /** 201 JSON with allow-listed headers, a cookie and a request id. */
    const created: RequestHandler = (req, res) => {
      res.cookie('session', 's3cr3t', { httpOnly: true });
      res.set('x-request-id', `req-${Math.random()}`);
      res.location('/v1/charges/ch_1');
      res.set('etag', '"v1"');
      res.status(201).json({ id: 'ch_1', body: req.body ?? null, at: Math.random() });
    };

    describe('which requests are protected', () => {
      it('GET, PUT and DELETE with a key pass through unprotected: the handler runs every time, no row is written', async () => {
        const { app, idem, counted, start, send, counter, count } = await setup({ required: true });
        const seen: unknown[] = [];
        const h = counted((_req, res) => {
          seen.push(res.locals.idem);
          res.send('ok');
        });
        app.get('/v1/things/:id', idem, h);
        app.put('/v1/things/:id', idem, h);
        app.delete('/v1/things/:id', idem, h);
        await start();
        for (const method of ['GET', 'PUT', 'DELETE', 'GET', 'PUT', 'DELETE']) {
          const res = await send('/v1/things/1', { method, key: 'same-key' });
          assert.equal(res.status, 200, method);
          assert.equal(res.headers.get('idempotent-replayed'), null);
          await res.arrayBuffer();
        }
        assert.equal(counter.H, 6);
        assert.deepEqual(seen, Array(6).fill(undefined));
        assert.equal(await count(), 0);
      });

      it('a POST without a key passes through when not required; with required: true it gets a 400 problem, H=0, nothing stored', async () => {
        const open = await setup();
        open.app.post('/v1/charges', open.idem, open.counted((req, res) => void res.status(201).json(req.body)));
        await open.start();
        const a = await open.send('/v1/charges', { json: { amount: 1 } });
        assert.deepEqual(await a.json(), { amount: 1 });
        const b = await open.send('/v1/charges', { json: { amount: 1 } });
        assert.equal(b.status, 201);
        assert.equal(b.headers.get('idempotent-replayed'), null);
        await b.arrayBuffer();
        assert.equal(open.counter.H, 2);
        assert.equal(await open.count(), 0);

        const strict = await setup({ required: true });
        strict.app.post('/v1/charges', strict.idem, strict.counted(created));
        await strict.start();
        await assertProblem(await strict.send('/v1/charges', { json: { amount: 1 } }), 400, 'idempotency-key-missing');
        assert.equal(strict.counter.H, 0);
        assert.equal(await strict.count(), 0);
      });
    });

    describe('the key', () => {
      for (const [name, value] of INVALID_KEYS) {
        it(`${name} gets a 400 idempotency-key-invalid problem, H=0, no row`, async () => {
          const { app, idem, counted, start, send, counter, count } = await setup();
          app.post('/v1/charges', idem, counted(created));
          await start();
          await assertProblem(await send('/v1/charges', { key: value, json: { amount: 1 } }), 400, 'idempotency-key-invalid');
          assert.equal(counter.H, 0);
          assert.equal(await count(), 0);
        });
      }

      it('two Idempotency-Key header lines on a real socket get a 400 idempotency-key-invalid problem, H=0, no row', async () => {
        const { app, idem, counted, start, counter, count } = await setup();
        app.post('/v1/charges', idem, counted(created));
        const url = await start();
        for (const keys of [['k1', 'k2'], ['k1', 'k1'], ['"k1"', '"k1"']] as Array<[string, string]>) {
          const res = await postWithTwoKeyLines(url + '/v1/charges', keys, '{"amount":1}');
          assert.equal(res.status, 400, `${keys.join(' / ')}: ${res.text}`);
          assert.equal(res.type, 'application/problem+json');
          assert.equal(JSON.parse(res.text).type, 'urn:idem:problem:idempotency-key-invalid');
          assert.equal(JSON.parse(res.text).status, 400);
        }
        assert.equal(counter.H, 0);
        assert.equal(await count(), 0);
      });

      it('one header line "Idempotency-Key: a,b" on a real socket is the key "a,b" (lines are known): stored whole, and replayed', async () => {
        const { app, idem, counted, start, send, counter, rows } = await setup();
        app.post('/v1/charges', idem, counted(created));
        const url = await start();
        const first = await rawPost(url + '/v1/charges', { 'Idempotency-Key': 'a,b' }, '{"amount":1}');
        assert.equal(first.status, 201, first.text);
        assert.deepEqual((await rows()).map((r) => [r.key, r.state]), [['a,b', 'done']]);
        const replay = await send('/v1/charges', { key: 'a,b', json: { amount: 1 } });
        assert.equal(replay.status, 201);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.text(), first.text);
        const spaced = await send('/v1/charges', { key: 'a, b', json: { amount: 1 } });
        assert.equal(spaced.headers.get('idempotent-replayed'), null, '"a, b" is another key');
        await spaced.arrayBuffer();
        assert.equal(counter.H, 2);
        // Two lines "a" and "b" are still two keys, never the key "a,b".
        const twoLines = await postWithTwoKeyLines(url + '/v1/charges', ['a', 'b'], '{"amount":1}');
        assert.equal(twoLines.status, 400, twoLines.text);
        assert.equal(counter.H, 2);
      });

      it('the sf-string "k1" and the bare token k1 are the same key: the second is a replay', async () => {
        const { app, idem, counted, start, send, counter, rows } = await setup();
        app.post('/v1/charges', idem, counted(created));
        await start();
        const first = await send('/v1/charges', { key: '"k1"', json: { amount: 5 } });
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
      it('a retry gets the same status, byte-identical body, content-type/location/etag and Idempotent-Replayed: true; never Set-Cookie or x-request-id', async () => {
        const { app, idem, counted, start, send, counter, rows } = await setup();
        app.post('/v1/charges', idem, counted(created));
        await start();
        const first = await send('/v1/charges', { key: 'replay-1', json: { amount: 100 } });
        assert.equal(first.status, 201);
        assert.equal(first.headers.get('idempotent-replayed'), null);
        assert.match(first.headers.getSetCookie()[0] ?? '', /^session=s3cr3t/);
        assert.match(first.headers.get('x-request-id') ?? '', /^req-/);
        const firstBody = await bytes(first);
        assert.deepEqual(JSON.parse(Buffer.from(firstBody).toString()).body, { amount: 100 });
        for (let i = 0; i < 2; i++) {
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
        }
        assert.equal(counter.H, 1);
        assert.doesNotMatch(JSON.stringify((await rows())[0]!.response_headers), /s3cr3t|x-request-id/);
      });

      it('a binary body with 0x00 and 0xff bytes and an empty 204 round-trip exactly', async () => {
        const { app, idem, counted, start, send, counter } = await setup();
        const payload = new Uint8Array([0x00, 0xff, 0x00, 0x80, 0x7f, 0x0d, 0x0a, 0xfe]);
        app.post(
          '/v1/blobs',
          idem,
          counted((req, res) => {
            assert.ok(Buffer.isBuffer(req.body), 'req.body is the raw Buffer');
            res.status(201).type('application/octet-stream').send(Buffer.concat([Buffer.from([0xff]), req.body as Buffer, Buffer.from([0x00])]));
          }),
        );
        app.post('/v1/things/:id/archive', idem, counted((_req, res) => void res.status(204).end()));
        await start();
        const opts = { key: 'bin-1', body: payload, headers: { 'content-type': 'application/octet-stream' } };
        const first = await send('/v1/blobs', opts);
        assert.equal(first.status, 201);
        const firstBytes = await bytes(first);
        assert.equal(hex(firstBytes), 'ff' + hex(payload) + '00');
        const replay = await send('/v1/blobs', opts);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(replay.headers.get('content-type'), 'application/octet-stream');
        assert.equal(hex(await bytes(replay)), hex(firstBytes));

        const empty = await send('/v1/things/1/archive', { key: 'nc-1' });
        assert.equal(empty.status, 204);
        assert.equal((await bytes(empty)).length, 0);
        const emptyReplay = await send('/v1/things/1/archive', { key: 'nc-1' });
        assert.equal(emptyReplay.status, 204);
        assert.equal(emptyReplay.headers.get('idempotent-replayed'), 'true');
        assert.equal((await bytes(emptyReplay)).length, 0);
        assert.equal(counter.H, 2);
      });

      it('a route answering with res.writeHead() + res.end() is recorded and replayed (the head is not committed before recording)', async () => {
        const { app, idem, counted, start, send, counter, rows } = await setup();
        app.post(
          '/v1/raw',
          idem,
          counted((_req, res) => {
            res.setHeader('x-request-id', 'req-raw');
            res.writeHead(201, { 'content-type': 'application/json', location: '/v1/raw/1' });
            res.end('{"raw":true}');
          }),
        );
        await start();
        const first = await send('/v1/raw', { key: 'wh-1', json: {} });
        assert.equal(first.status, 201);
        assert.equal(first.headers.get('x-request-id'), 'req-raw');
        assert.equal(await first.text(), '{"raw":true}');
        const [row] = await rows();
        assert.equal(row!.state, 'done');
        const replay = await send('/v1/raw', { key: 'wh-1', json: {} });
        assert.equal(replay.status, 201);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(replay.headers.get('content-type'), 'application/json');
        assert.equal(replay.headers.get('location'), '/v1/raw/1');
        assert.equal(replay.headers.get('x-request-id'), null);
        assert.equal(await replay.text(), '{"raw":true}');
        assert.equal(counter.H, 1);
      });

      it('a returned 402 and a returned 500 are stored and replayed (H=1 each)', async () => {
        const { app, idem, counted, start, send, counter, rows } = await setup();
        app.post('/v1/charges', idem, counted((_req, res) => void res.status(402).json({ error: { code: 'card_declined' } })));
        app.post('/v1/reports', idem, counted((_req, res) => void res.status(500).send('upstream said no')));
        await start();
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
      it('with express.json(): reordered JSON keys replay; a different body, path, query or method gets 422 and the original still replays', async () => {
        const { app, idem, counted, start, send, counter, rows } = await setup();
        app.post('/v1/charges', idem, counted(created));
        app.patch('/v1/charges', idem, counted(created));
        app.post('/v1/refunds', idem, counted(created));
        await start();
        const json = { 'content-type': 'application/json' };
        const first = await send('/v1/charges?expand=a', { key: 'r1', body: '{"amount":1,"currency":"eur"}', headers: json });
        assert.equal(first.status, 201);
        const firstText = await first.text();
        const reordered = await send('/v1/charges?expand=a', { key: 'r1', body: '{ "currency": "eur", "amount": 1 }', headers: json });
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

      it('without a body parser: the middleware reads the raw body (req.body is the exact Buffer); reordered JSON replays, a different body gets 422', async () => {
        const { app, idem, counted, start, send, counter } = await setup({}, { parser: false });
        const seen: unknown[] = [];
        app.post(
          '/v1/charges',
          idem,
          counted((req, res) => {
            seen.push(req.body);
            res.status(201).json({ raw: Buffer.isBuffer(req.body) ? (req.body as Buffer).toString('utf8') : null });
          }),
        );
        await start();
        const json = { 'content-type': 'application/json' };
        const first = await send('/v1/charges', { key: 'raw-1', body: '{"b":2,"a":1}', headers: json });
        assert.deepEqual(await first.json(), { raw: '{"b":2,"a":1}' });
        assert.equal(seen.length, 1);
        assert.ok(Buffer.isBuffer(seen[0]), 'req.body is a Buffer');
        const reordered = await send('/v1/charges', { key: 'raw-1', body: '{"a":1,"b":2}', headers: json });
        assert.equal(reordered.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(await reordered.json(), { raw: '{"b":2,"a":1}' });
        await assertProblem(await send('/v1/charges', { key: 'raw-1', body: '{"a":1,"b":3}', headers: json }), 422, 'idempotency-key-reused');
        assert.equal(counter.H, 1);
      });

      it('mismatchStatus: 409 answers a reused key with 409', async () => {
        const { app, idem, counted, start, send, counter } = await setup({ mismatchStatus: 409 });
        app.post('/v1/charges', idem, counted(created));
        await start();
        assert.equal((await send('/v1/charges', { key: 'm', json: { a: 1 } })).status, 201);
        await assertProblem(await send('/v1/charges', { key: 'm', json: { a: 2 } }), 409, 'idempotency-key-reused');
        assert.equal(counter.H, 1);
      });
    });

    describe('while the first request is running', () => {
      it('a different body gets 422 (not 409); the same request gets 409 request-in-progress with Retry-After in [1, ceil(lease/1000)]', async () => {
        const leaseMs = 4000;
        const { app, idem, counted, start, send, counter } = await setup({ leaseMs });
        const entered = deferred();
        const gate = deferred();
        app.post(
          '/v1/charges',
          idem,
          counted(async (req, res, next) => {
            entered.resolve();
            await gate.promise;
            return created(req, res, next);
          }),
        );
        await start();
        const first = send('/v1/charges', { key: 'busy', json: { amount: 1 } });
        await entered.promise;
        await assertProblem(await send('/v1/charges', { key: 'busy', json: { amount: 2 } }), 422, 'idempotency-key-reused');
        const busy = await send('/v1/charges', { key: 'busy', json: { amount: 1 } });
        const retryAfter = busy.headers.get('retry-after') ?? '';
        await assertProblem(busy, 409, 'request-in-progress');
        assert.match(retryAfter, /^\d+$/);
        assert.ok(Number(retryAfter) >= 1 && Number(retryAfter) <= Math.ceil(leaseMs / 1000), `Retry-After ${retryAfter}`);
        gate.resolve();
        const done = await first;
        assert.equal(done.status, 201);
        await done.arrayBuffer();
        const replay = await send('/v1/charges', { key: 'busy', json: { amount: 1 } });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        await replay.arrayBuffer();
        assert.equal(counter.H, 1);
      });

      it('50 parallel identical requests over real HTTP: H=1, one row, every answer a 201 (original or replay) or a 409', async () => {
        const { app, idem, counted, start, send, counter, count } = await setup();
        app.post(
          '/v1/charges',
          idem,
          counted(async (req, res) => {
            const charge = await ctxOf(res).phase('charge', async (tx) => {
              await tx.query('SELECT 1');
              return { id: 'ch_parallel', body: req.body as unknown };
            });
            await new Promise((r) => setTimeout(r, 150));
            res.status(201).json(charge);
          }),
        );
        await start();
        const responses = await Promise.all(Array.from({ length: 50 }, () => send('/v1/charges', { key: 'parallel-1', json: { amount: 42 } })));
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

    describe('client disconnects', () => {
      it('a client disconnecting mid-work does not cancel the work or the write of its result', async () => {
        const { app, idem, counted, start, send, counter, rows } = await setup();
        const entered = deferred();
        const gate = deferred();
        app.post(
          '/v1/charges',
          idem,
          counted(async (_req, res) => {
            entered.resolve();
            await gate.promise;
            const charge = await ctxOf(res).phase('charge', async () => ({ id: 'ch_disc' }));
            res.status(201).json(charge);
          }),
        );
        const base = await start();
        const abort = new AbortController();
        const gone = fetch(base + '/v1/charges', { ...init({ key: 'disc', json: { amount: 1 } }), signal: abort.signal }).then(
          () => 'answered',
          () => 'aborted',
        );
        await entered.promise;
        abort.abort();
        assert.equal(await gone, 'aborted');
        gate.resolve();
        const row = await poll(async () => (await rows()).find((r) => r.state === 'done'), 3000, 'the result to be stored');
        assert.equal(row.response_status, 201);
        const retry = await send('/v1/charges', { key: 'disc', json: { amount: 1 } });
        assert.equal(retry.status, 201);
        assert.equal(retry.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(await retry.json(), { id: 'ch_disc' });
        assert.equal(counter.H, 1);
      });
    });

    describe('scope', () => {
      it('two Authorization credentials with the same key and body each run once; the raw credential is never stored', async () => {
        const { app, idem, counted, start, send, counter, rows, table } = await setup();
        app.post('/v1/charges', idem, counted((req, res) => void res.status(201).json({ owner: req.get('authorization') })));
        await start();
        const a = await send('/v1/charges', { key: 'shared', json: { x: 1 }, headers: { authorization: 'Bearer sk_secret_tenant_a' } });
        const b = await send('/v1/charges', { key: 'shared', json: { x: 1 }, headers: { authorization: 'Bearer sk_secret_tenant_b' } });
        assert.deepEqual(await a.json(), { owner: 'Bearer sk_secret_tenant_a' });
        assert.deepEqual(await b.json(), { owner: 'Bearer sk_secret_tenant_b' });
        assert.equal(b.headers.get('idempotent-replayed'), null);
        const rb = await send('/v1/charges', { key: 'shared', json: { x: 1 }, headers: { authorization: 'Bearer sk_secret_tenant_b' } });
        assert.equal(rb.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(await rb.json(), { owner: 'Bearer sk_secret_tenant_b' });
        assert.equal(counter.H, 2);
        const hash = (s: string) => 'auth:' + createHash('sha256').update(s).digest('base64url');
        assert.deepEqual((await rows()).map((r) => r.scope).sort(), [hash('Bearer sk_secret_tenant_a'), hash('Bearer sk_secret_tenant_b')].sort());
        assert.ok(!(await tableText(db.client, table)).includes('sk_secret_tenant'), 'no credential in the table');
      });

      it('a custom scope resolver decides the scope', async () => {
        const { app, idem, counted, start, send, counter, rows } = await setup({ scope: (req) => `tenant:${req.headers.get('x-tenant')}` });
        app.post('/v1/charges', idem, counted(created));
        await start();
        await (await send('/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't1', authorization: 'Bearer one' } })).arrayBuffer();
        const rotated = await send('/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't1', authorization: 'Bearer two' } });
        assert.equal(rotated.headers.get('idempotent-replayed'), 'true');
        const other = await send('/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't2', authorization: 'Bearer one' } });
        assert.equal(other.headers.get('idempotent-replayed'), null);
        await Promise.all([rotated.arrayBuffer(), other.arrayBuffer()]);
        assert.equal(counter.H, 2);
        assert.deepEqual((await rows()).map((r) => r.scope), ['tenant:t1', 'tenant:t2']);
      });
    });

    describe('what gets stored', () => {
      it('a 400 returned before any phase is not stored; the fixed retry with the same key runs', async () => {
        const { app, idem, counted, start, send, counter, count } = await setup();
        app.post(
          '/v1/charges',
          idem,
          counted(async (req, res) => {
            const body = req.body as { amount?: unknown };
            if (typeof body.amount !== 'number') return void res.status(400).json({ error: 'amount required' });
            const charge = await ctxOf(res).phase('charge', async () => ({ amount: body.amount }));
            res.status(201).json(charge);
          }),
        );
        await start();
        const bad = await send('/v1/charges', { key: 'fix', json: {} });
        assert.equal(bad.status, 400);
        assert.deepEqual(await bad.json(), { error: 'amount required' });
        assert.equal(await count(), 0);
        const fixed = await send('/v1/charges', { key: 'fix', json: { amount: 3 } });
        assert.equal(fixed.status, 201);
        assert.equal(fixed.headers.get('idempotent-replayed'), null);
        assert.deepEqual(await fixed.json(), { amount: 3 });
        assert.equal(counter.H, 2);
        assert.equal(await count(), 1);
      });

      it('ctx.reject() with a 409 is not stored and frees the key; a 400 after a committed phase is stored', async () => {
        const { app, idem, counted, start, send, counter, count, rows } = await setup();
        let conflict = true;
        app.post(
          '/v1/orders',
          idem,
          counted((_req, res) => {
            if (conflict) {
              ctxOf(res).reject();
              return void res.status(409).json({ error: 'version conflict' });
            }
            res.status(201).json({ ok: true });
          }),
        );
        app.post(
          '/v1/late',
          idem,
          counted(async (_req, res) => {
            await ctxOf(res).phase('reserved', async () => true);
            res.status(400).json({ error: 'declined after reserve' });
          }),
        );
        await start();
        const rejected = await send('/v1/orders', { key: 'rej', json: {} });
        assert.equal(rejected.status, 409);
        assert.deepEqual(await rejected.json(), { error: 'version conflict' });
        assert.equal(await count(), 0);
        conflict = false;
        const retry = await send('/v1/orders', { key: 'rej', json: {} });
        assert.equal(retry.status, 201);
        await retry.arrayBuffer();
        assert.equal(counter.H, 2);

        await (await send('/v1/late', { key: 'late', json: {} })).arrayBuffer();
        const replay = await send('/v1/late', { key: 'late', json: {} });
        assert.equal(replay.status, 400);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(await replay.json(), { error: 'declined after reserve' });
        assert.equal(counter.H, 3);
        assert.deepEqual((await rows()).map((r) => [r.key, r.state, r.response_status]), [['late', 'done', 400], ['rej', 'done', 201]]);
      });
    });

    describe('thrown errors (idem.onError mounted after the routes)', () => {
      it('a thrown error releases the key with a 500 request-failed-retry problem; the retry resumes after the committed phase', async () => {
        const { app, idem, counted, start, send, counter, rows, errors } = await setup();
        const runs = { a: 0, b: 0 };
        let crash = true;
        app.post(
          '/v1/transfers',
          idem,
          counted(async (_req, res) => {
            const x = ctxOf(res);
            const a = await x.phase('a', async (tx) => {
              runs.a++;
              await tx.query('SELECT 1');
              return 'A';
            });
            if (crash) {
              crash = false;
              res.set('x-partial', 'yes'); // headers set before the crash must not leak into the problem
              throw new Error('crash mid-work');
            }
            const b = await x.phase('b', async () => {
              runs.b++;
              return 'B';
            });
            res.status(201).json({ a, b, resumed: x.resumed });
          }),
        );
        await start();
        const failed = await send('/v1/transfers', { key: 't1', json: {} });
        assert.equal(failed.headers.get('x-partial'), null);
        await assertProblem(failed, 500, 'request-failed-retry');
        assert.equal(errors.length, 1);
        const [row] = await rows();
        assert.deepEqual([row!.state, row!.recovery_point, row!.locked], ['started', 'a', false]);
        const retry = await send('/v1/transfers', { key: 't1', json: {} });
        assert.equal(retry.status, 201);
        assert.deepEqual(await retry.json(), { a: 'A', b: 'B', resumed: true });
        assert.deepEqual(runs, { a: 1, b: 1 });
        assert.equal(counter.H, 2);
        const replay = await send('/v1/transfers', { key: 't1', json: {} });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        await replay.arrayBuffer();
        assert.equal(counter.H, 2);
      });

      for (const mode of ['sync', 'async'] as const) {
        it(`a route that ends its response and then throws (${mode}): the client gets the route's response, stored and replayed`, async () => {
          const { app, idem, counted, start, send, counter, rows, errors } = await setup();
          const reached: unknown[] = [];
          app.post(
            '/v1/orders',
            idem,
            counted(
              mode === 'sync'
                ? (_req, res) => {
                    res.status(201).json({ id: 'ord_1', nonce: Math.random() });
                    throw new Error('cleanup failed after the response');
                  }
                : async (_req, res) => {
                    await ctxOf(res).phase('order', async () => 'ord_1');
                    res.status(201).json({ id: 'ord_1', nonce: Math.random() });
                    await new Promise((r) => setTimeout(r, 5));
                    throw new Error('cleanup failed after the response');
                  },
            ),
          );
          app.use(((error, _req, _res, next) => {
            reached.push(error);
            next(error);
          }) as ErrorRequestHandler);
          await start();
          const first = await send('/v1/orders', { key: 'end-then-throw', json: {} });
          assert.equal(first.status, 201);
          const body = await first.text();
          assert.equal((JSON.parse(body) as { id: string }).id, 'ord_1');
          assert.equal(first.headers.get('content-type')?.startsWith('application/json'), true);
          const [row] = await rows();
          assert.equal(row!.state, 'done');
          assert.equal(row!.response_status, 201);
          assert.equal(row!.response_body, hex(Buffer.from(body)));
          const replay = await send('/v1/orders', { key: 'end-then-throw', json: {} });
          assert.equal(replay.status, 201);
          assert.equal(replay.headers.get('idempotent-replayed'), 'true');
          assert.equal(await replay.text(), body);
          assert.equal(counter.H, 1);
          assert.deepEqual(errors, [], 'the late error is not handled as a failed request');
          assert.equal(reached.length, 1, 'the late error still reaches the app error handlers');
        });
      }

      it('without idem.onError, a route that ends and then throws does not crash the server (no unhandled rejection); its response is stored and replays', async () => {
        const { app, idem, counted, rows } = await setup();
        app.post(
          '/v1/orders',
          idem,
          counted((_req, res) => {
            res.status(201).json({ id: 'ord_2' });
            throw new Error('late failure, no idem.onError mounted');
          }),
        );
        app.use(lastResort); // the app's own handler answers at once: idem's recorded response comes too late
        const server = await listen(app);
        cleanups.push(server.close);
        const first = await fetch(server.url + '/v1/orders', init({ key: 'no-on-error', json: {} }));
        await first.arrayBuffer();
        const [row] = await poll(async () => {
          const r = await rows();
          return r[0]?.state === 'done' ? r : undefined;
        }, 3000, 'the response to be recorded');
        assert.equal(row!.response_status, 201);
        const replay = await fetch(server.url + '/v1/orders', init({ key: 'no-on-error', json: {} }));
        assert.equal(replay.status, 201);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(await replay.json(), { id: 'ord_2' });
        await new Promise((r) => setTimeout(r, 50)); // an unhandled rejection would fail this test
      });

      it('a route that flushes its headers early is still recorded whole and replayed; flushing and then throwing still gets the 500 problem', async () => {
        const { app, idem, counted, start, send, counter, rows } = await setup();
        let crash = true;
        app.post(
          '/v1/stream',
          idem,
          counted(async (_req, res) => {
            res.statusCode = 202;
            res.setHeader('content-type', 'application/json');
            res.flushHeaders();
            await ctxOf(res).phase('started', async () => 1);
            if (crash) {
              crash = false;
              throw new Error('failed after flushHeaders');
            }
            res.write('{"part":1,');
            res.end('"done":true}');
          }),
        );
        await start();
        const failed = await send('/v1/stream', { key: 'flush', json: {} });
        await assertProblem(failed, 500, 'request-failed-retry');
        let [row] = await rows();
        assert.deepEqual([row!.state, row!.recovery_point, row!.locked], ['started', 'started', false], 'released at once');
        const retry = await send('/v1/stream', { key: 'flush', json: {} });
        assert.equal(retry.status, 202);
        assert.equal(retry.headers.get('content-type'), 'application/json');
        assert.equal(await retry.text(), '{"part":1,"done":true}');
        [row] = await rows();
        assert.equal(row!.state, 'done');
        const replay = await send('/v1/stream', { key: 'flush', json: {} });
        assert.equal(replay.status, 202);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.text(), '{"part":1,"done":true}');
        assert.equal(counter.H, 2);
      });

      it('a throw after the head was committed behind idem\'s back (headers sent): the lease is still released and the retry resumes', async () => {
        const { app, idem, counted, start, counter, rows } = await setup();
        let crash = true;
        app.post(
          '/v1/transfers',
          idem,
          counted(async (_req, res) => {
            await ctxOf(res).phase('a', async () => 'A');
            if (crash) {
              crash = false;
              // Something writes the head straight through Node's prototype, past idem's capture.
              http.ServerResponse.prototype.writeHead.call(res, 200, { 'content-type': 'text/plain' });
              http.ServerResponse.prototype.flushHeaders.call(res);
              assert.equal(res.headersSent, true, 'the head is on the wire');
              throw new Error('crash after the head was sent');
            }
            res.status(201).json({ resumed: ctxOf(res).resumed });
          }),
        );
        const url = await start();
        const first = await rawPost(url + '/v1/transfers', { 'Idempotency-Key': 'sent' }, '{}');
        assert.notEqual(first.status, 201, `the first attempt cannot succeed: ${first.status} ${first.text}`);
        const [row] = await poll(async () => {
          const r = await rows();
          return r[0]?.locked === false ? r : undefined;
        }, 3000, 'the lease to be released');
        assert.deepEqual([row!.state, row!.recovery_point], ['started', 'a']);
        const retry = await rawPost(url + '/v1/transfers', { 'Idempotency-Key': 'sent' }, '{}');
        assert.equal(retry.status, 201, `the retry takes over at once (60 s lease): ${retry.text}`);
        assert.deepEqual(JSON.parse(retry.text), { resumed: true });
        assert.equal(counter.H, 2);
      });

      it('a route that ends normally after its head went out past the capture: the connection is closed, never left hanging; the response is stored', { timeout: 10_000 }, async () => {
        const { app, idem, counted, start, counter, rows } = await setup();
        app.post(
          '/v1/raw',
          idem,
          counted((_req, res) => {
            http.ServerResponse.prototype.writeHead.call(res, 200, { 'content-type': 'text/plain' });
            http.ServerResponse.prototype.flushHeaders.call(res);
            res.end('raw body');
          }),
        );
        const url = await start();
        const first = await rawPost(url + '/v1/raw', { 'Idempotency-Key': 'past-capture' }, '{}');
        assert.equal(first.complete, false, `idem cannot send its recorded response on a committed head: ${first.status} ${first.text}`);
        const [row] = await poll(async () => {
          const r = await rows();
          return r[0]?.state === 'done' ? r : undefined;
        }, 3000, 'the response to be recorded');
        assert.equal(row!.response_body, hex(Buffer.from('raw body')));
        const replay = await rawPost(url + '/v1/raw', { 'Idempotency-Key': 'past-capture' }, '{}');
        assert.equal(replay.status, 200);
        assert.equal(replay.text, 'raw body');
        assert.equal(counter.H, 1);
      });

      it("onThrow: 'store' stores the 500 problem and replays it", async () => {
        const { app, idem, counted, start, send, counter } = await setup({ onThrow: 'store' });
        app.post(
          '/v1/transfers',
          idem,
          counted(async () => {
            throw new Error('boom');
          }),
        );
        await start();
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

    describe('retention', () => {
      it('after retention the same key runs fresh (H=2); replays do not extend it', async () => {
        const { app, idem, counted, start, send, counter, count } = await setup({ retentionMs: 1500, leaseMs: 500, heartbeatMs: 0 });
        app.post('/v1/charges', idem, counted(created));
        await start();
        const started = Date.now();
        assert.equal((await send('/v1/charges', { key: 'ret', json: {} })).status, 201);
        const fresh = await poll(
          async () => {
            const res = await send('/v1/charges', { key: 'ret', json: {} });
            await res.arrayBuffer();
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
        const { app, idem, counted, start, send } = await setup({ problems: { stripe: true, docsUrl } });
        app.post('/v1/charges', idem, counted(created));
        await start();
        await (await send('/v1/charges', { key: 'p', json: { a: 1 } })).arrayBuffer();
        const res = await send('/v1/charges', { key: 'p', json: { a: 2 } });
        assert.equal(res.headers.get('link'), `<${docsUrl}>; rel="describedby"`);
        const body = await assertProblem(res, 422, 'idempotency-key-reused');
        assert.deepEqual(body.error, { type: 'idempotency_error', code: 'idempotency_key_reused', message: body.detail });
      });
    });
  });
}

describe('Express adapter with an unreachable store', () => {
  it('answers a 503 idempotency-store-unavailable problem and does not run the handler', async () => {
    const down = unreachableStore();
    const app = express();
    let H = 0;
    app.post('/v1/charges', express.json(), idempotency({ store: down.store }), (_req, res) => {
      H++;
      res.status(201).send('ran');
    });
    const server = await listen(app);
    try {
      const res = await fetch(server.url + '/v1/charges', init({ key: 'down', json: { amount: 1 } }));
      assert.equal(res.headers.get('retry-after'), '1');
      await assertProblem(res, 503, 'idempotency-store-unavailable');
      assert.equal(H, 0);
    } finally {
      await server.close();
      await down.close();
    }
  });
});
