/**
 * What only the Express adapter can show, on a real Express 5 app listening on port 0: raw
 * socket header lines, the body with and without a body parser, the writeHead / flushHeaders
 * capture, a route that ends and then throws, `idem.onError`, and a head sent past the
 * capture. Every shared HTTP behaviour runs against Express in the adapter contract suite
 * (test/adapters.test.ts). Real databases: PGlite always, PostgreSQL when DATABASE_URL is
 * set. H counts how many times the handler ran.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import express, { type ErrorRequestHandler, type RequestHandler, type Response as ExpressResponse } from 'express';
import { idempotency, type ExpressIdempotency } from '../src/express/index.js';
import type { IdempotencyContext } from '../src/http/context.js';
import type { IdempotencyOptions } from '../src/http/idempotency.js';
import type { Queryable } from '../src/postgres/client.js';
import { lastResort, listen } from './helpers/adapter-harness.js';
import { engines, freshStore, useEngine } from './helpers/engines.js';
import { assertProblem, countRows, hex, keyRows, poll, requestInit as init, type Send } from './helpers/http.js';

const ctxOf = (res: ExpressResponse) => res.locals.idem as IdempotencyContext<Queryable>;

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

for (const engine of engines) {
  describe(`Express adapter over ${engine.name}`, () => {
    const db = useEngine(engine);

    /**
     * An Express app with a fresh table. Register routes on `app`, then `start()`: it mounts
     * `idem.onError` after the routes and listens. `parser: false` leaves out express.json().
     */
    async function setup(options: Partial<IdempotencyOptions<Queryable>> = {}, { parser = true } = {}) {
      const { store, table, drop } = await freshStore(db.client());
      db.cleanup(drop);
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
        const server = await listen(http.createServer(app));
        db.cleanup(server.close);
        url = server.url;
        return server.url;
      };
      const send = (path: string, s: Send = {}) => fetch(url + path, init(s));
      return { app, idem, table, counter, errors, counted, start, send, rows: () => keyRows(db.client(), table), count: () => countRows(db.client(), table) };
    }

    /** 201 JSON with allow-listed headers, a cookie and a request id. */
    const created: RequestHandler = (req, res) => {
      res.cookie('session', 's3cr3t', { httpOnly: true });
      res.set('x-request-id', `req-${Math.random()}`);
      res.location('/v1/charges/ch_1');
      res.set('etag', '"v1"');
      res.status(201).json({ id: 'ch_1', body: req.body ?? null, at: Math.random() });
    };
    describe('the key on a real socket', () => {
      it('two Idempotency-Key header lines on a real socket get a 400 idempotency-key-invalid problem, H=0, no row', async () => {
        const { app, idem, counted, start, counter, count } = await setup();
        app.post('/v1/charges', idem, counted(created));
        const url = await start();
        for (const keys of [
          ['k1', 'k2'],
          ['k1', 'k1'],
          ['"k1"', '"k1"'],
        ] as Array<[string, string]>) {
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
        assert.deepEqual(
          (await rows()).map((r) => [r.key, r.state]),
          [['a,b', 'done']],
        );
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
    });

    describe('the body and the response capture', () => {
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

      it("a middleware's own res.write/res.end wrappers mounted before idem (as compression does) get the recorded response once and stay in place; the others are Node's again after the capture", async () => {
        const { app, idem, counted, start, send, counter } = await setup();
        const seen: string[] = [];
        const after: Array<{ ownEnd: boolean; ownWrite: boolean; ownWriteHead: boolean; ownDestroy: boolean; endIsWrapper: boolean }> = [];
        app.use((_req, res, next) => {
          const end = res.end;
          const write = res.write;
          const wrapperEnd = function end_(this: ExpressResponse, ...args: unknown[]) {
            if (args[0] !== undefined && typeof args[0] !== 'function') seen.push(`end:${String(args[0])}`);
            return (end as (...a: unknown[]) => ExpressResponse).apply(this, args);
          } as ExpressResponse['end'];
          res.end = wrapperEnd;
          res.write = function write_(this: ExpressResponse, ...args: unknown[]) {
            seen.push(`write:${String(args[0])}`);
            return (write as (...a: unknown[]) => boolean).apply(this, args);
          } as ExpressResponse['write'];
          res.on('finish', () =>
            after.push({
              ownEnd: Object.hasOwn(res, 'end'),
              ownWrite: Object.hasOwn(res, 'write'),
              ownWriteHead: Object.hasOwn(res, 'writeHead'),
              ownDestroy: Object.hasOwn(res, 'destroy'),
              endIsWrapper: res.end === wrapperEnd,
            }),
          );
          next();
        });
        app.post(
          '/v1/wrapped',
          idem,
          counted((_req, res) => {
            res.status(201).json({ wrapped: true });
          }),
        );
        await start();
        const first = await send('/v1/wrapped', { key: 'wrap-1', json: {} });
        assert.equal(first.status, 201);
        assert.equal(await first.text(), '{"wrapped":true}');
        await poll(() => (after.length === 1 ? true : undefined), 5000, 'the response to finish');
        assert.deepEqual(seen, ['end:{"wrapped":true}'], 'the wrapper saw the recorded body once, at the send');
        assert.deepEqual(after[0], { ownEnd: true, ownWrite: true, ownWriteHead: false, ownDestroy: false, endIsWrapper: true });
        const replay = await send('/v1/wrapped', { key: 'wrap-1', json: {} });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.text(), '{"wrapped":true}');
        assert.equal(counter.H, 1);
      });

      it('a status or header a route changes after res.end() (the head not sent yet) is not sent: the first answer is the one recorded and replayed', async () => {
        const { app, idem, counted, start, send, counter } = await setup();
        app.post(
          '/v1/late',
          idem,
          counted((_req, res) => {
            res.set('etag', '"v1"');
            res.status(201).json({ late: false });
            res.status(202);
            res.set('location', '/v1/late/1');
            res.set('etag', '"v2"');
            res.removeHeader('content-type');
          }),
        );
        await start();
        const answers = [await send('/v1/late', { key: 'late-1', json: {} }), await send('/v1/late', { key: 'late-1', json: {} })];
        for (const [i, res] of answers.entries()) {
          assert.equal(res.status, 201, `answer ${i + 1}`);
          assert.equal(res.headers.get('location'), null, `answer ${i + 1}`);
          assert.equal(res.headers.get('etag'), '"v1"', `answer ${i + 1}`);
          assert.match(res.headers.get('content-type') ?? '', /^application\/json/, `answer ${i + 1}`);
          assert.equal(await res.text(), '{"late":false}', `answer ${i + 1}`);
        }
        assert.equal(answers[1]!.headers.get('idempotent-replayed'), 'true');
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
    });

    describe('thrown errors (idem.onError mounted after the routes)', () => {
      it('headers a route set before it threw do not leak into the 500 problem; the retry runs', async () => {
        const { app, idem, counted, start, send, counter, errors } = await setup();
        let crash = true;
        app.post(
          '/v1/transfers',
          idem,
          counted(async (_req, res) => {
            await ctxOf(res).phase('a', async () => 'A');
            if (crash) {
              crash = false;
              res.set('x-partial', 'yes'); // headers set before the crash must not leak into the problem
              throw new Error('crash mid-work');
            }
            res.status(201).json({ resumed: ctxOf(res).resumed });
          }),
        );
        await start();
        const failed = await send('/v1/transfers', { key: 't1', json: {} });
        assert.equal(failed.headers.get('x-partial'), null);
        await assertProblem(failed, 500, 'request-failed-retry');
        assert.equal(errors.length, 1);
        const retry = await send('/v1/transfers', { key: 't1', json: {} });
        assert.equal(retry.status, 201);
        assert.deepEqual(await retry.json(), { resumed: true });
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
          // The late error travels on its own, after the response: wait for it to arrive (readiness, not a fixed sleep).
          await poll(() => (reached.length > 0 ? true : undefined), 10_000, 'the late error reaching the app error handlers');
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
        const server = await listen(http.createServer(app));
        db.cleanup(server.close);
        const first = await fetch(server.url + '/v1/orders', init({ key: 'no-on-error', json: {} }));
        await first.arrayBuffer();
        const [row] = await poll(
          async () => {
            const r = await rows();
            return r[0]?.state === 'done' ? r : undefined;
          },
          3000,
          'the response to be recorded',
        );
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

      it("a throw after the head was committed behind idem's back (headers sent): the lease is still released and the retry resumes", async () => {
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
        const [row] = await poll(
          async () => {
            const r = await rows();
            return r[0]?.locked === false ? r : undefined;
          },
          3000,
          'the lease to be released',
        );
        assert.deepEqual([row!.state, row!.recovery_point], ['started', 'a']);
        const retry = await rawPost(url + '/v1/transfers', { 'Idempotency-Key': 'sent' }, '{}');
        assert.equal(retry.status, 201, `the retry takes over at once (60 s lease): ${retry.text}`);
        assert.deepEqual(JSON.parse(retry.text), { resumed: true });
        assert.equal(counter.H, 2);
      });

      it('a route that ends normally after its head went out past the capture: the connection is closed, never left hanging; the response is stored', {
        timeout: 10_000,
      }, async () => {
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
        const [row] = await poll(
          async () => {
            const r = await rows();
            return r[0]?.state === 'done' ? r : undefined;
          },
          3000,
          'the response to be recorded',
        );
        assert.equal(row!.response_body, hex(Buffer.from('raw body')));
        const replay = await rawPost(url + '/v1/raw', { 'Idempotency-Key': 'past-capture' }, '{}');
        assert.equal(replay.status, 200);
        assert.equal(replay.text, 'raw body');
        assert.equal(counter.H, 1);
      });
    });
  });
}
