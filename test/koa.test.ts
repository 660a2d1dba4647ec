/**
 * What only idem/koa can show, on a real Koa 3 app listening on port 0: the raw body read
 * once and still parsed by `@koa/bodyparser` (mounted after idem, or before it), the ways a
 * Koa route answers (object, stream, `ctx.throw`), and a route that bypasses Koa's response.
 * Real databases: PGlite always, PostgreSQL when DATABASE_URL is set. The shared HTTP
 * behaviours run in the contract suite (test/adapters-koa.test.ts).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { Readable } from 'node:stream';
import Koa from 'koa';
import { bodyParser } from '@koa/bodyparser';
import { idempotency } from '../src/koa/index.js';
import type { IdempotencyContext } from '../src/http/context.js';
import type { IdempotencyOptions } from '../src/http/idempotency.js';
import type { Queryable, SqlClient } from '../src/postgres/client.js';
import { listen } from './helpers/adapter-harness.js';
import { engines, freshStore, tableName, useEngine } from './helpers/engines.js';
import { assertProblem, countRows, hex, keyRows, requestInit, type Send } from './helpers/http.js';
import { createApp } from '../examples/koa/app.js';

type Route = (ctx: Koa.Context, idem: IdempotencyContext<Queryable> | undefined) => Promise<void> | void;

for (const engine of engines) {
  describe(`Koa adapter over ${engine.name}`, () => {
    const db = useEngine(engine);

    /** A Koa app: idem, then (unless `parserFirst`) @koa/bodyparser, then `route`. */
    async function app(route: Route, options: { parserFirst?: boolean; idem?: Partial<IdempotencyOptions<Queryable>> } = {}) {
      const fresh = await freshStore(db.client());
      db.cleanup(fresh.drop);
      const koa = new Koa();
      koa.silent = true;
      if (options.parserFirst) koa.use(bodyParser());
      koa.use(idempotency<Queryable>({ store: fresh.store, ...options.idem }));
      if (!options.parserFirst) koa.use(bodyParser());
      const counter = { H: 0 };
      koa.use(async (ctx) => {
        counter.H++;
        await route(ctx, ctx.state.idem as IdempotencyContext<Queryable> | undefined);
      });
      const server = await listen(http.createServer(koa.callback()));
      db.cleanup(server.close);
      return {
        counter,
        table: fresh.table,
        send: (path: string, s: Send) => fetch(server.url + path, requestInit(s)),
        count: () => countRows(db.client(), fresh.table),
      };
    }

    describe('the body', () => {
      it('@koa/bodyparser mounted after idem still parses the JSON idem read (and keeps rawBody)', async () => {
        const seen: unknown[] = [];
        const { send, counter } = await app((ctx) => {
          seen.push([ctx.request.body, (ctx.request as { rawBody?: string }).rawBody]);
          ctx.status = 201;
          ctx.body = { ok: true };
        });
        const first = await send('/v1/charges', { key: 'kb-1', json: { amount: 7, currency: 'eur' } });
        assert.equal(first.status, 201);
        await first.arrayBuffer();
        assert.deepEqual(seen, [[{ amount: 7, currency: 'eur' }, '{"amount":7,"currency":"eur"}']]);
        const replay = await send('/v1/charges', { key: 'kb-1', json: { currency: 'eur', amount: 7 } });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true', 'reordered JSON is the same request');
        await replay.arrayBuffer();
        assert.equal(counter.H, 1);
      });

      it('with the parser mounted first, idem fingerprints its rawBody: a changed body is 422, the same one replays', async () => {
        const { send, counter } = await app(
          (ctx) => {
            ctx.status = 201;
            ctx.body = { got: ctx.request.body };
          },
          { parserFirst: true },
        );
        assert.equal((await send('/v1/x', { key: 'pf', json: { a: 1 } })).status, 201);
        const changed = await send('/v1/x', { key: 'pf', json: { a: 2 } });
        assert.equal(changed.status, 422);
        await changed.arrayBuffer();
        const same = await send('/v1/x', { key: 'pf', json: { a: 1 } });
        assert.equal(same.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(await same.json(), { got: { a: 1 } });
        assert.equal(counter.H, 1);
      });
    });

    describe('the README example (examples/koa/app.ts)', () => {
      it('no key: 400 problem; a charge is created once and replayed with its Location; a 400 from validation is not stored', async () => {
        const fresh = await freshStore(db.client());
        const charges = tableName('charges');
        db.cleanup(async () => {
          await fresh.drop();
          await (db.client() as Queryable).query(`DROP TABLE IF EXISTS "${charges}"`);
        });
        const server = await listen(http.createServer((await createApp({ db: db.client() as SqlClient & Queryable, table: fresh.table, charges })).callback()));
        db.cleanup(server.close);
        const post = (s: Send) => fetch(server.url + '/v1/charges', requestInit(s));
        await assertProblem(await post({ json: { amount: 1 } }), 400, 'idempotency-key-missing');
        const first = await post({ key: 'koa-ex-1', json: { amount: 1000 } });
        assert.equal(first.status, 201);
        const text = await first.text();
        assert.equal(first.headers.get('location'), `/v1/charges/${JSON.parse(text).id}`);
        const replay = await post({ key: 'koa-ex-1', json: { amount: 1000 } });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(replay.headers.get('location'), first.headers.get('location'));
        assert.equal(await replay.text(), text);
        const bad = await post({ key: 'koa-ex-2', json: { amount: 'lots' } });
        assert.equal(bad.status, 400);
        assert.equal(await bad.text(), 'amount must be an integer');
        assert.equal(await countRows(db.client(), fresh.table), 1, 'only the charge is stored');
        assert.equal(await countRows(db.client(), charges), 1, 'one charge row');
      });
    });

    describe('what a Koa route answers', () => {
      it('a stream body is read whole, sent, stored and replayed with the same bytes', async () => {
        const { send, counter } = await app((ctx) => {
          ctx.status = 201;
          ctx.type = 'application/octet-stream';
          ctx.body = Readable.from([Buffer.from([0x00, 0xff]), Buffer.from([0x01, 0x80, 0x00])]);
        });
        const first = await send('/v1/blobs', { key: 'st-1', body: 'x' });
        assert.equal(first.status, 201);
        const firstHex = hex(new Uint8Array(await first.arrayBuffer()));
        assert.equal(firstHex, '00ff018000');
        const replay = await send('/v1/blobs', { key: 'st-1', body: 'x' });
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(replay.headers.get('content-type'), 'application/octet-stream');
        assert.equal(hex(new Uint8Array(await replay.arrayBuffer())), firstHex);
        assert.equal(counter.H, 1);
      });

      it('ctx.throw(400) before any phase is sent as Koa sends it and not stored; the retry runs', async () => {
        const { send, counter, count } = await app((ctx) => ctx.throw(400, 'amount required'));
        const first = await send('/v1/charges', { key: 'th-400', json: {} });
        assert.equal(first.status, 400);
        assert.equal(await first.text(), 'amount required');
        assert.equal(await count(), 0);
        const again = await send('/v1/charges', { key: 'th-400', json: {} });
        assert.equal(again.headers.get('idempotent-replayed'), null);
        await again.arrayBuffer();
        assert.equal(counter.H, 2);
      });

      it('ctx.throw(404) is a deliberate answer: stored and replayed, not a 500', async () => {
        const { send, counter, table } = await app((ctx) => ctx.throw(404, 'no such order'));
        const first = await send('/v1/orders/9', { key: 'th-404', json: {} });
        assert.equal(first.status, 404);
        assert.equal(await first.text(), 'no such order');
        const replay = await send('/v1/orders/9', { key: 'th-404', json: {} });
        assert.equal(replay.status, 404);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.text(), 'no such order');
        assert.equal(counter.H, 1);
        assert.equal((await keyRows(db.client(), table))[0]!.response_status, 404);
      });

      it('a route that bypasses Koa (ctx.respond = false) is refused: the lease is released, nothing stored', async () => {
        const { send, table } = await app((ctx) => {
          ctx.respond = false;
          ctx.res.statusCode = 201;
          ctx.res.end('raw');
        });
        const res = await send('/v1/raw', { key: 'raw-1', json: {} });
        await res.arrayBuffer();
        const [row] = await keyRows(db.client(), table);
        assert.deepEqual([row!.state, row!.locked, row!.response_status], ['started', false, null]);
      });
    });
  });
}
