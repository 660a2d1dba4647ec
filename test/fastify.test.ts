/**
 * What only Fastify shows (the shared behaviour is in the adapter contract suite,
 * test/adapters-fastify-nest.test.ts): the example app, the raw body fingerprinted before
 * Fastify's content-type parser, per-route and whole-scope enablement, encapsulation, streams,
 * `reply.hijack()` refused, thrown 4xx errors. Real Fastify 5 over real sockets, on PGlite.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import type { PGlite } from '@electric-sql/pglite';
import { pglite } from './helpers/pglite.js';
import type { FastifyInstance } from 'fastify';
import { UnsupportedResponseError } from '../src/core/errors.js';
import { idempotency, type FastifyIdempotencyOptions } from '../src/fastify/index.js';
import type { Queryable } from '../src/postgres/client.js';
import { buildApp } from '../examples/fastify/app.js';
import { freshStore, tableName } from './helpers/engines.js';
import { fastifyApp } from './helpers/harness-fastify.js';
import { assertProblem, countRows, keyRows, requestInit, type Send } from './helpers/http.js';

let db: PGlite;
const closers: Array<() => Promise<unknown>> = [];
before(async () => {
  db = pglite();
  await db.waitReady;
});
after(async () => {
  for (const close of closers.reverse()) await close().catch(() => undefined);
  await db.close();
});

async function listen(app: FastifyInstance): Promise<(path: string, s?: Send) => Promise<Response>> {
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  closers.push(() => app.close());
  return (path, s = {}) => fetch(base + path, requestInit(s));
}

/** A fresh table and an app built by `routes` after the plugin is registered with `options`. */
async function setup(routes: (app: FastifyInstance, runs: { n: number }) => void, options: Partial<FastifyIdempotencyOptions<Queryable>> = {}) {
  const { store, table, drop } = await freshStore(db);
  closers.push(drop);
  const app = fastifyApp();
  const runs = { n: 0 };
  const errors: unknown[] = [];
  await app.register(idempotency, { store, onHandlerError: (e) => errors.push(e), ...options });
  routes(app, runs);
  return { send: await listen(app), runs, errors, table, count: () => countRows(db, table) };
}

describe('idem/fastify', () => {
  describe('the example (examples/fastify/app.ts)', () => {
    it('creates an order once: the retry replays the 201 byte for byte; a schema 400 is not stored and the fixed retry runs', async () => {
      const table = tableName();
      const orders = tableName('orders');
      closers.push(async () => {
        await db.query(`DROP TABLE IF EXISTS "${table}_blobs"; DROP TABLE IF EXISTS "${table}"; DROP TABLE IF EXISTS "${orders}"`);
      });
      const send = await listen(await buildApp({ db, table, orders }));
      await assertProblem(await send('/v1/orders', { json: { total: 5 } }), 400, 'idempotency-key-missing');
      const invalid = await send('/v1/orders', { key: 'o-1', json: { total: 'five' } });
      assert.equal(invalid.status, 400, 'Fastify schema validation');
      await invalid.arrayBuffer();
      assert.equal(await countRows(db, table), 0, 'the rejected request freed its key');
      const first = await send('/v1/orders', { key: 'o-1', json: { total: 5 } });
      assert.equal(first.status, 201);
      const text = await first.text();
      assert.equal(JSON.parse(text).total, 5, 'request.body parsed after the raw body was captured');
      const retry = await send('/v1/orders', { key: 'o-1', json: { total: 5 } });
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get('idempotent-replayed'), 'true');
      assert.equal(await retry.text(), text);
      assert.equal(await countRows(db, orders), 1, 'one order for two requests');
    });
  });

  describe('the raw body', () => {
    it('is fingerprinted before the content-type parser: two bodies a parser maps to the same value are still different requests', async () => {
      const { send, runs } = await setup((app) => {
        // A parser that lower-cases: "ABC" and "abc" parse to the same body.
        app.addContentTypeParser('text/x-lower', { parseAs: 'string' }, (_req, body, done) => done(null, String(body).toLowerCase()));
        app.post('/v1/notes', { config: { idempotency: true } }, async (request) => {
          runs.n++;
          return { body: request.body };
        });
      });
      const as = (body: string) => ({ key: 'raw-1', body, headers: { 'content-type': 'text/x-lower' } });
      const first = await send('/v1/notes', as('ABC'));
      assert.deepEqual(await first.json(), { body: 'abc' }, 'request.body is what the parser made of the re-fed bytes');
      await assertProblem(await send('/v1/notes', as('abc')), 422, 'idempotency-key-reused');
      const same = await send('/v1/notes', as('ABC'));
      assert.equal(same.headers.get('idempotent-replayed'), 'true');
      await same.arrayBuffer();
      assert.equal(runs.n, 1);
    });

    it('JSON that differs only in whitespace and key order is the same request (canonical JSON of the raw bytes)', async () => {
      const { send, runs } = await setup((app) => {
        app.post('/v1/charges', { config: { idempotency: true } }, async (request) => {
          runs.n++;
          return request.body;
        });
      });
      const json = { 'content-type': 'application/json' };
      const first = await send('/v1/charges', { key: 'ws', body: '{"a":1,"b":[1,2]}', headers: json });
      assert.deepEqual(await first.json(), { a: 1, b: [1, 2] });
      const retry = await send('/v1/charges', { key: 'ws', body: '{ "b": [1, 2], "a": 1 }', headers: json });
      assert.equal(retry.headers.get('idempotent-replayed'), 'true');
      await retry.arrayBuffer();
      assert.equal(runs.n, 1);
    });

    it("a malformed JSON body gets Fastify's own 400 and claims nothing; a body over bodyLimit gets 413 and claims nothing", async () => {
      const { send, runs, count } = await setup((app) => {
        app.post('/v1/small', { config: { idempotency: true }, bodyLimit: 16 }, async () => {
          runs.n++;
          return { ok: true };
        });
      });
      const bad = await send('/v1/small', { key: 'm', body: '{"a":', headers: { 'content-type': 'application/json' } });
      assert.equal(bad.status, 400);
      assert.equal(((await bad.json()) as { code: string }).code, 'FST_ERR_CTP_INVALID_JSON_BODY');
      const big = await send('/v1/small', { key: 'big', json: { text: 'x'.repeat(100) } });
      assert.equal(big.status, 413);
      await big.arrayBuffer();
      assert.equal(runs.n, 0);
      assert.equal(await count(), 0);
    });
  });

  describe('enablement', () => {
    it('per route: only routes with config.idempotency are protected; an options object overrides the plugin options', async () => {
      const { send, runs, count } = await setup((app) => {
        app.post('/v1/protected', { config: { idempotency: true } }, async () => ({ n: ++runs.n }));
        app.post('/v1/plain', async () => ({ n: ++runs.n }));
        app.post('/v1/strict', { config: { idempotency: { required: true } } }, async () => ({ n: ++runs.n }));
      });
      await (await send('/v1/protected', { key: 'p' })).arrayBuffer();
      const replay = await send('/v1/protected', { key: 'p' });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await replay.arrayBuffer();
      for (let i = 0; i < 2; i++) {
        const plain = await send('/v1/plain', { key: 'p' });
        assert.equal(plain.headers.get('idempotent-replayed'), null);
        await plain.arrayBuffer();
      }
      const noKey = await send('/v1/protected');
      assert.equal(noKey.status, 200, 'not required on /v1/protected');
      await noKey.arrayBuffer();
      await assertProblem(await send('/v1/strict'), 400, 'idempotency-key-missing');
      assert.equal(runs.n, 4);
      assert.equal(await count(), 1);
    });

    it('all: true protects every route of the scope; config.idempotency: false opts one out', async () => {
      const { send, runs } = await setup(
        (app) => {
          app.post('/v1/a', async () => ({ n: ++runs.n }));
          app.post('/v1/b', async () => ({ n: ++runs.n }));
          app.post('/v1/out', { config: { idempotency: false } }, async () => ({ n: ++runs.n }));
        },
        { all: true, required: true },
      );
      await assertProblem(await send('/v1/a'), 400, 'idempotency-key-missing');
      await assertProblem(await send('/v1/b'), 400, 'idempotency-key-missing');
      const out = await send('/v1/out');
      assert.equal(out.status, 200);
      await out.arrayBuffer();
      assert.equal(runs.n, 1);
    });

    it('encapsulation: registered in a child scope, it protects that scope only, not its sibling nor the parent', async () => {
      const { store, table, drop } = await freshStore(db);
      closers.push(drop);
      const app = fastifyApp();
      const runs = { n: 0 };
      await app.register(
        async (scope) => {
          await scope.register(idempotency, { store, all: true });
          scope.post('/inside', async (request) => ({ n: ++runs.n, protected: request.idem !== undefined }));
        },
        { prefix: '/a' },
      );
      await app.register(
        async (scope) => {
          scope.post('/outside', async (request) => ({ n: ++runs.n, protected: request.idem !== undefined }));
        },
        { prefix: '/b' },
      );
      app.post('/root', async (request) => ({ n: ++runs.n, protected: request.idem !== undefined }));
      const send = await listen(app);
      const inside = await send('/a/inside', { key: 'k' });
      assert.deepEqual(await inside.json(), { n: 1, protected: true });
      const again = await send('/a/inside', { key: 'k' });
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await again.json(), { n: 1, protected: true });
      for (const path of ['/b/outside', '/root', '/b/outside']) {
        const res = await send(path, { key: 'k' });
        assert.equal(res.headers.get('idempotent-replayed'), null, path);
        assert.equal(((await res.json()) as { protected: boolean }).protected, false, path);
      }
      assert.equal(runs.n, 4);
      assert.equal(await countRows(db, table), 1);
    });
  });

  describe('replies', () => {
    it('a Node stream and a web ReadableStream sent with reply.send are recorded whole and replayed byte for byte', async () => {
      const { send, runs } = await setup((app) => {
        app.post('/v1/node-stream', { config: { idempotency: true } }, async (_request, reply) => {
          runs.n++;
          reply.header('content-type', 'application/octet-stream');
          return reply.send(Readable.from([Buffer.from([0, 1]), Buffer.from([0xff, 0x00, 0x7f])]));
        });
        app.post('/v1/web-stream', { config: { idempotency: true } }, async (_request, reply) => {
          runs.n++;
          reply.header('content-type', 'text/plain');
          return reply.code(202).send(new Blob(['hello ', 'web ', 'stream']).stream());
        });
      });
      for (const [path, status, hex] of [
        ['/v1/node-stream', 200, '0001ff007f'],
        ['/v1/web-stream', 202, Buffer.from('hello web stream').toString('hex')],
      ] as const) {
        const first = await send(path, { key: `s${path}` });
        assert.equal(first.status, status);
        assert.equal(Buffer.from(await first.arrayBuffer()).toString('hex'), hex);
        const replay = await send(path, { key: `s${path}` });
        assert.equal(replay.status, status);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(Buffer.from(await replay.arrayBuffer()).toString('hex'), hex);
      }
      assert.equal(runs.n, 2);
    });

    it('reply.hijack() is refused with UnsupportedResponseError: idem answers its 500 problem, releases the lease, the retry runs', async () => {
      let hijack = true;
      const { send, runs, errors, table } = await setup((app) => {
        app.post('/v1/raw', { config: { idempotency: true } }, async (_request, reply) => {
          runs.n++;
          if (hijack) {
            reply.hijack();
            reply.raw.end('written behind idem');
            return reply;
          }
          return { ok: true };
        });
      });
      await assertProblem(await send('/v1/raw', { key: 'h' }), 500, 'request-failed-retry');
      assert.equal(errors.length, 1);
      assert.ok(errors[0] instanceof UnsupportedResponseError);
      assert.equal((errors[0] as UnsupportedResponseError).code, 'IDEM_UNSUPPORTED_RESPONSE');
      assert.match((errors[0] as Error).message, /reply\.hijack\(\)/);
      const [row] = await keyRows(db, table);
      assert.deepEqual([row!.state, row!.locked], ['started', false], 'released, not stored');
      hijack = false;
      const retry = await send('/v1/raw', { key: 'h' });
      assert.deepEqual(await retry.json(), { ok: true });
      assert.equal(runs.n, 2);
    });

    it('a thrown error with a 4xx statusCode is a deliberate response (not stored before any phase); one without is a crash (500 problem)', async () => {
      const { send, runs, count } = await setup((app) => {
        app.post('/v1/deliberate', { config: { idempotency: true } }, async () => {
          runs.n++;
          throw Object.assign(new Error('not allowed'), { statusCode: 403 });
        });
        app.post('/v1/crash', { config: { idempotency: true } }, async () => {
          runs.n++;
          throw new Error('boom');
        });
      });
      const denied = await send('/v1/deliberate', { key: 'd' });
      assert.equal(denied.status, 403);
      assert.equal(((await denied.json()) as { message: string }).message, 'not allowed');
      assert.equal(await count(), 0, 'a 403 before any phase frees the key');
      await assertProblem(await send('/v1/crash', { key: 'c' }), 500, 'request-failed-retry');
      assert.equal(runs.n, 2);
    });
  });
});
