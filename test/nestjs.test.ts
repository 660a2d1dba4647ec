/**
 * What only NestJS shows (the shared behaviour is in the adapter contract suite,
 * test/adapters-fastify-nest.test.ts): the example app (forRootAsync with an injected database,
 * the store injectable, a handler that returns its value with @HttpCode), the @IdemContext()
 * parameter decorator, per-route @Idempotent options, @Idempotent on the controller, an
 * HttpException as a deliberate response, a crash through Nest's exception filter. Each on the
 * real @nestjs/core app on the Express and on the Fastify platform, over real sockets, on PGlite.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { PGlite } from '@electric-sql/pglite';
import { pglite } from './helpers/pglite.js';
import { Body, Controller, Get, HttpCode, Inject, Module, Post, type DynamicModule } from '@nestjs/common';
import {
  IDEMPOTENCY,
  IDEMPOTENCY_STORE,
  IdemContext,
  Idempotent,
  IdempotencyModule,
  type HttpIdempotency,
  type IdempotencyContext,
} from '../src/nestjs/index.js';
import type { IdempotencyOptions } from '../src/http/idempotency.js';
import type { Queryable } from '../src/postgres/client.js';
import type { PostgresStore } from '../src/postgres/index.js';
import { AppModule, OrdersController } from '../examples/nestjs/app.js';
import { freshStore, tableName } from './helpers/engines.js';
import { startNest } from './helpers/harness-nestjs.js';
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

const runs = { n: 0 };
let lastContext: IdempotencyContext<Queryable> | undefined | 'unset' = 'unset';

@Controller('v1')
class ProbeController {
  @Post('probe')
  @Idempotent()
  probe(@Body() body: unknown, @IdemContext() idem: IdempotencyContext<Queryable> | undefined) {
    runs.n++;
    lastContext = idem;
    return { body, key: idem?.key ?? null, n: runs.n };
  }

  @Post('strict')
  @Idempotent({ required: true, mismatchStatus: 409 })
  strict(@Body() body: unknown) {
    runs.n++;
    return { body };
  }

  @Post('unmarked')
  unmarked(@IdemContext() idem: IdempotencyContext<Queryable> | undefined) {
    runs.n++;
    return { protected: idem !== undefined, n: runs.n };
  }

  @Post('crash')
  @HttpCode(201)
  @Idempotent()
  async crash(@IdemContext() idem: IdempotencyContext<Queryable>) {
    runs.n++;
    await idem.phase('a', async () => 1);
    if (runs.n === 1) throw new Error('exploded after phase a');
    return { resumed: idem.resumed };
  }
}

@Controller('v2')
@Idempotent()
class MarkedController {
  @Post('twice')
  @Idempotent()
  twice(@IdemContext() idem: IdempotencyContext<Queryable> | undefined) {
    runs.n++;
    return { key: idem?.key ?? null };
  }

  @Get('read')
  read(@IdemContext() idem: IdempotencyContext<Queryable> | undefined) {
    return { protected: idem !== undefined };
  }
}

const STORE_SEEN = Symbol('store-seen');
@Controller('v3')
class StoreController {
  constructor(
    @Inject(IDEMPOTENCY_STORE) private readonly store: PostgresStore,
    @Inject(IDEMPOTENCY) private readonly core: HttpIdempotency,
  ) {}
  @Get('store')
  info() {
    return { table: this.store.table, shared: this.core.engine.store === this.store };
  }
}

@Module({})
class ProbeModule {
  static with(options: IdempotencyOptions<Queryable>): DynamicModule {
    return {
      module: ProbeModule,
      imports: [IdempotencyModule.forRoot(options)],
      controllers: [ProbeController, MarkedController, StoreController],
      providers: [{ provide: STORE_SEEN, useValue: true }],
    };
  }
}

for (const platform of ['express', 'fastify'] as const) {
  describe(`idem/nestjs on the ${platform} platform`, () => {
    const start = async (module: DynamicModule) => {
      const { url } = await startNest(platform, module, (fn) => void closers.push(fn));
      return (path: string, s: Send = {}) => fetch(url + path, requestInit(s));
    };
    const probe = async (options: Partial<IdempotencyOptions<Queryable>> = {}) => {
      const { store, table, drop } = await freshStore(db);
      closers.push(drop);
      runs.n = 0;
      lastContext = 'unset';
      const errors: unknown[] = [];
      const send = await start(ProbeModule.with({ store, onHandlerError: (e) => errors.push(e), ...options }));
      return { send, table, errors, store };
    };

    it('the example (examples/nestjs/app.ts): one order per key, the 201 replayed byte for byte, a BadRequestException frees the key', async () => {
      const table = tableName();
      const orders = tableName('orders');
      closers.push(() => db.query(`DROP TABLE IF EXISTS "${table}_blobs"; DROP TABLE IF EXISTS "${table}"; DROP TABLE IF EXISTS "${orders}"`));
      const send = await start(AppModule.with(db, table, orders));
      await assertProblem(await send('/v1/orders', { json: { total: 5 } }), 400, 'idempotency-key-missing');
      const invalid = await send('/v1/orders', { key: 'o-1', json: { total: 'five' } });
      assert.equal(invalid.status, 400);
      assert.equal(((await invalid.json()) as { message: string }).message, 'total must be a positive integer');
      assert.equal(await countRows(db, table), 0, 'the rejected request freed its key');
      const first = await send('/v1/orders', { key: 'o-1', json: { total: 5 } });
      assert.equal(first.status, 201, 'the status from @HttpCode');
      const text = await first.text();
      assert.equal((JSON.parse(text) as { total: number }).total, 5);
      const retry = await send('/v1/orders', { key: 'o-1', json: { total: 5 } });
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get('idempotent-replayed'), 'true');
      assert.equal(await retry.text(), text);
      const count = await send('/v1/orders/count', { method: 'GET' });
      assert.deepEqual(await count.json(), { orders: 1 });
      assert.equal(OrdersController.name, 'OrdersController');
    });

    it('@IdemContext() gives the context on a protected request, undefined without a key and on a route without @Idempotent', async () => {
      const { send, table } = await probe();
      const first = await send('/v1/probe', { key: 'ctx-1', json: { a: 1 } });
      assert.equal(first.status, 201, "Nest's default status for POST");
      assert.deepEqual(await first.json(), { body: { a: 1 }, key: 'ctx-1', n: 1 });
      assert.ok(lastContext !== 'unset' && lastContext !== undefined && typeof lastContext.phase === 'function');
      const replay = await send('/v1/probe', { key: 'ctx-1', json: { a: 1 } });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await replay.json(), { body: { a: 1 }, key: 'ctx-1', n: 1 });
      const noKey = await send('/v1/probe', { json: { a: 1 } });
      assert.deepEqual(await noKey.json(), { body: { a: 1 }, key: null, n: 2 });
      assert.equal(lastContext, undefined);
      for (let i = 0; i < 2; i++) {
        const unmarked = await send('/v1/unmarked', { key: 'ctx-1' });
        assert.equal(unmarked.headers.get('idempotent-replayed'), null);
        assert.equal(((await unmarked.json()) as { protected: boolean }).protected, false);
      }
      assert.equal(runs.n, 4);
      assert.equal(await countRows(db, table), 1);
    });

    it('@Idempotent(options) overrides the module options for that route only', async () => {
      const { send } = await probe();
      await assertProblem(await send('/v1/strict', { json: {} }), 400, 'idempotency-key-missing');
      await (await send('/v1/strict', { key: 's', json: { a: 1 } })).arrayBuffer();
      await assertProblem(await send('/v1/strict', { key: 's', json: { a: 2 } }), 409, 'idempotency-key-reused');
      const loose = await send('/v1/probe', { json: {} });
      assert.equal(loose.status, 201, 'the module default: a key is not required');
      await loose.arrayBuffer();
      await (await send('/v1/probe', { key: 'p', json: { a: 1 } })).arrayBuffer();
      await assertProblem(await send('/v1/probe', { key: 'p', json: { a: 2 } }), 422, 'idempotency-key-reused');
    });

    it('@Idempotent() on the controller and the handler runs idem once; GET stays unprotected', async () => {
      const { send, table } = await probe();
      const first = await send('/v2/twice', { key: 't' });
      assert.deepEqual(await first.json(), { key: 't' });
      const replay = await send('/v2/twice', { key: 't' });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await replay.arrayBuffer();
      assert.equal(runs.n, 1);
      assert.equal(await countRows(db, table), 1);
      const read = await send('/v2/read', { method: 'GET', key: 't' });
      assert.deepEqual(await read.json(), { protected: false });
    });

    it("a crash goes through Nest's exception filter and is answered with idem's 500 problem; the lease is released and the retry resumes", async () => {
      const { send, table, errors } = await probe();
      await assertProblem(await send('/v1/crash', { key: 'c' }), 500, 'request-failed-retry');
      assert.equal(errors.length, 1);
      const [row] = await keyRows(db, table);
      assert.deepEqual([row!.state, row!.recovery_point, row!.locked], ['started', 'a', false]);
      const retry = await send('/v1/crash', { key: 'c' });
      assert.equal(retry.status, 201);
      assert.deepEqual(await retry.json(), { resumed: true });
      assert.equal(runs.n, 2);
    });

    it('without rawBody the parsed JSON body is fingerprinted canonically: whitespace and key order replay, another value is a 422', async () => {
      const { store, drop } = await freshStore(db);
      closers.push(drop);
      runs.n = 0;
      const { url } = await startNest(platform, ProbeModule.with({ store }), (fn) => void closers.push(fn), { rawBody: false });
      const send = (s: Send) => fetch(url + '/v1/probe', requestInit(s));
      const json = { 'content-type': 'application/json' };
      const first = await send({ key: 'nr', body: '{"a":1,"b":2}', headers: json });
      assert.deepEqual(await first.json(), { body: { a: 1, b: 2 }, key: 'nr', n: 1 });
      const same = await send({ key: 'nr', body: '{ "b": 2, "a": 1 }', headers: json });
      assert.equal(same.headers.get('idempotent-replayed'), 'true');
      await same.arrayBuffer();
      await assertProblem(await send({ key: 'nr', body: '{"a":1,"b":3}', headers: json }), 422, 'idempotency-key-reused');
      assert.equal(runs.n, 1);
    });

    it('the store and the core are injectable (IDEMPOTENCY_STORE, IDEMPOTENCY)', async () => {
      const { send, store } = await probe();
      const res = await send('/v3/store', { method: 'GET' });
      assert.deepEqual(await res.json(), { table: store.table, shared: true });
    });
  });
}
