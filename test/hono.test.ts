/**
 * What only the Hono adapter can show, on a real Hono app (`app.request()`): a thrown
 * HTTPException is a returned response, a thrown non-Error value still releases the key, and
 * `c.req.json()` still reads the body the middleware read. Every shared HTTP behaviour runs
 * against Hono in the adapter contract suite (test/adapters.test.ts). Real databases: PGlite
 * always, PostgreSQL when DATABASE_URL is set. H counts how many times the handler ran.
 */
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { after, describe, it } from 'node:test';
import { serve } from '@hono/node-server';
import assert from 'node:assert/strict';
import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { idempotency, type IdempotencyVariables } from '../src/hono/index.js';
import type { IdempotencyOptions } from '../src/http/idempotency.js';
import type { Queryable } from '../src/postgres/client.js';
import { honoApp } from './helpers/adapter-harness.js';
import { engines, freshStore, useEngine } from './helpers/engines.js';
import { assertProblem, countRows, keyRows, requestInit, type Send } from './helpers/http.js';

type C = Context<{ Variables: IdempotencyVariables<Queryable> }>;

for (const engine of engines) {
  describe(`Hono adapter over ${engine.name}`, () => {
    const db = useEngine(engine);

    /** A Hono app whose idempotency middleware uses a fresh table; `H` counts handler runs. */
    async function setup(options: Partial<IdempotencyOptions<Queryable>> = {}) {
      const { store, table, drop } = await freshStore(db.client());
      db.cleanup(drop);
      const app = honoApp();
      const errors: unknown[] = [];
      const idem = idempotency<Queryable>({ store, onHandlerError: (e) => errors.push(e), ...options });
      const counter = { H: 0 };
      const counted =
        (handler: (c: C) => Response | Promise<Response>) =>
        (c: C): Response | Promise<Response> => {
          counter.H++;
          return handler(c);
        };
      const send = (path: string, s: Send = {}) => app.request(path, requestInit(s));
      return { app, idem, counter, errors, counted, send, rows: () => keyRows(db.client(), table), count: () => countRows(db.client(), table) };
    }

    it('a thrown HTTPException(400) counts as a returned 400: not stored, the key is freed; c.req.json() still reads the body', async () => {
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
      assert.deepEqual(await fixed.json(), { amount: 9 }, 'c.req.json() read the body after the middleware');
      assert.equal(counter.H, 2);
      assert.equal(await count(), 1);
    });

    it('with a replay cache, on @hono/node-server, a replay shares its built headers across hits, yet a middleware changing one replay changes no other', async () => {
      const { app, counted, counter } = await setup();
      const fresh = await freshStore(db.client());
      db.cleanup(fresh.drop);
      const idem = idempotency<Queryable>({ store: fresh.store, replayCache: { maxBytes: 1 << 20 } });
      let n = 0;
      app.use('/v1/cached', async (c, next) => {
        await next();
        c.header('x-request-no', String(++n)); // set on the replayed Response after the middleware
      });
      app.post(
        '/v1/cached',
        idem,
        counted(async (c) => c.json({ amount: (await c.req.json<{ amount: number }>()).amount }, 201, { 'content-language': 'fr' })),
      );
      // A real server (its own Response class and header handling), over a real socket.
      const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
      await once(server, 'listening');
      after(() => new Promise<void>((resolve) => server.close(() => resolve())));
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const send = (path: string, s: Send) => fetch(base + path, requestInit(s));
      const first = await send('/v1/cached', { key: 'rc', json: { amount: 7 } });
      assert.equal(first.status, 201);
      assert.deepEqual(await first.json(), { amount: 7 }, 'c.req.json() read the body after the middleware');
      for (const expected of ['2', '3']) {
        const replay = await send('/v1/cached', { key: 'rc', json: { amount: 7 } });
        assert.equal(replay.status, 201);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(replay.headers.get('content-language'), 'fr');
        assert.equal(replay.headers.get('x-request-no'), expected, 'each replay carries only its own middleware header');
        assert.deepEqual(await replay.json(), { amount: 7 });
      }
      assert.equal(counter.H, 1);
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
  });
}
