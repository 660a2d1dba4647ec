/**
 * What only idem/lambda can show: the AWS documentation's example events (test/fixtures/lambda/)
 * through the wrapped handler, base64 bodies both ways, results in each event's own format,
 * the lease taken from the invocation's remaining time, and the Middy middleware on the real
 * `@middy/core`. Real databases: PGlite always, PostgreSQL when DATABASE_URL is set. The
 * shared HTTP behaviours run in the contract suite (test/adapters-lambda.test.ts).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import middy from '@middy/core';
import {
  type ApiGatewayProxyEventV1,
  type ApiGatewayProxyEventV2,
  idempotency,
  type IdempotentLambdaContext,
  invocationLeaseMs,
  type LambdaIdempotencyOptions,
  withIdempotency,
} from '../src/lambda/index.js';
import type { IdempotencyContext } from '../src/http/context.js';
import type { Queryable, SqlClient } from '../src/postgres/client.js';
import { engines, freshStore, tableName, useEngine } from './helpers/engines.js';
import { countRows, deferred, keyRows } from './helpers/http.js';
import { fixture, lambdaContext } from './helpers/harness-lambda.js';
import { migrateCharges } from '../examples/lambda/charge.js';
import { chargeHandler } from '../examples/lambda/handler.js';
import { middyChargeHandler } from '../examples/lambda/middy.js';

type Result = {
  statusCode: number;
  headers?: Record<string, string>;
  multiValueHeaders?: Record<string, string[]>;
  cookies?: string[];
  body?: string;
  isBase64Encoded?: boolean;
};

const charge = (event: { body?: string | null; isBase64Encoded?: boolean }) => ({
  statusCode: 201,
  headers: { 'content-type': 'application/json', location: '/v1/charges/ch_1', 'x-request-id': `req-${Math.random()}` },
  multiValueHeaders: { 'set-cookie': ['session=s3cr3t; HttpOnly'] },
  body: JSON.stringify({ id: 'ch_1', got: Buffer.from(event.body ?? '', event.isBase64Encoded ? 'base64' : 'utf8').toString('utf8'), at: Math.random() }),
});

/** The lease left on the key, in ms, on the database's clock. */
async function leaseLeftMs(db: Queryable, table: string): Promise<number> {
  const { rows } = await db.query(`SELECT GREATEST(0, EXTRACT(EPOCH FROM (locked_until - now())) * 1000)::float8 AS ms FROM "${table}"`);
  return Number(rows[0]!.ms);
}

describe('invocationLeaseMs', () => {
  it('is the remaining time plus the margin, never below the margin + 1 ms', () => {
    assert.equal(invocationLeaseMs(29_500.4, 1000), 30_501);
    assert.equal(invocationLeaseMs(0, 1000), 1001);
    assert.equal(invocationLeaseMs(-5, 250), 251);
  });
});

for (const engine of engines) {
  describe(`Lambda adapter over ${engine.name}`, () => {
    const db = useEngine(engine);
    async function table() {
      const fresh = await freshStore(db.client());
      db.cleanup(fresh.drop);
      return fresh;
    }

    describe('AWS-documented events through the wrapped handler', () => {
      it('REST API (1.0): the fixture runs once; the retry gets the 1.0 result with the same status, body and allow-listed headers, no Set-Cookie', async () => {
        const { store, table: t } = await table();
        let H = 0;
        const handler = withIdempotency<Queryable, ApiGatewayProxyEventV1>({ store }, async (event) => (H++, charge(event)));
        const first = (await handler(fixture('rest v1'), lambdaContext())) as Result;
        assert.equal(first.statusCode, 201);
        assert.equal(JSON.parse(first.body!).got, '{"amount":1000,"currency":"eur"}');
        assert.deepEqual(first.multiValueHeaders, { 'set-cookie': ['session=s3cr3t; HttpOnly'] });
        assert.equal(first.isBase64Encoded, false);
        const replay = (await handler(fixture('rest v1'), lambdaContext())) as Result;
        assert.equal(replay.statusCode, 201);
        assert.equal(replay.body, first.body);
        assert.equal(replay.headers!['idempotent-replayed'], 'true');
        assert.equal(replay.headers!.location, '/v1/charges/ch_1');
        assert.equal(replay.headers!['content-type'], 'application/json');
        assert.equal(replay.headers!['x-request-id'], undefined);
        assert.equal(replay.multiValueHeaders, undefined);
        assert.equal(H, 1);
        const [row] = await keyRows(db.client(), t);
        assert.equal(row!.key, '8e03978e-40d5-43e8-bc93-6894a57f9324');
      });

      it('HTTP API (2.0): a base64 body is fingerprinted decoded: the same JSON sent as text is a replay; cookies come back in `cookies`', async () => {
        const { store } = await table();
        let H = 0;
        const handler = withIdempotency<Queryable, ApiGatewayProxyEventV2>({ store }, async (event) => {
          H++;
          const r = charge(event);
          return { statusCode: r.statusCode, headers: r.headers, cookies: r.multiValueHeaders['set-cookie'], body: r.body };
        });
        const base64 = fixture<ApiGatewayProxyEventV2>('http v2');
        assert.equal(base64.isBase64Encoded, true);
        const first = (await handler(base64, lambdaContext())) as Result;
        assert.equal(first.statusCode, 201);
        assert.equal(JSON.parse(first.body!).got, '{"amount":1000,"currency":"eur"}', 'the handler got the event untouched (and decoded it)');
        assert.deepEqual(first.cookies, ['session=s3cr3t; HttpOnly']);
        const asText = { ...fixture<ApiGatewayProxyEventV2>('http v2'), body: '{"amount":1000,"currency":"eur"}', isBase64Encoded: false };
        const replay = (await handler(asText, lambdaContext())) as Result;
        assert.equal(replay.headers!['idempotent-replayed'], 'true');
        assert.equal(replay.body, first.body);
        assert.equal(replay.cookies, undefined);
        assert.equal(H, 1);
      });

      it('HTTP API (2.0): the Cookie header API Gateway moves into `cookies` still scopes the key', async () => {
        const { store, table: t } = await table();
        let H = 0;
        const handler = withIdempotency<Queryable, ApiGatewayProxyEventV2>({ store }, async () => (H++, { statusCode: 201, body: 'ok' }));
        await handler(fixture('http v2'), lambdaContext());
        await handler({ ...fixture<ApiGatewayProxyEventV2>('http v2'), cookies: ['cookie1=other'] }, lambdaContext());
        assert.equal(H, 2, 'another session is another scope');
        assert.equal((await keyRows(db.client(), t)).filter((r) => r.scope.startsWith('cookie:')).length, 2);
      });

      it('function URL: a binary response goes out base64 with isBase64Encoded, and the replay carries the same bytes', async () => {
        const { store } = await table();
        const bytes = Buffer.from([0x00, 0xff, 0x10, 0x80, 0x00]);
        const handler = withIdempotency<Queryable, ApiGatewayProxyEventV2>({ store }, async () => ({
          statusCode: 201,
          headers: { 'content-type': 'application/octet-stream' },
          body: bytes.toString('base64'),
          isBase64Encoded: true,
        }));
        const first = (await handler(fixture('function url'), lambdaContext())) as Result;
        assert.equal(first.isBase64Encoded, true);
        assert.equal(first.body, bytes.toString('base64'));
        const replay = (await handler(fixture('function url'), lambdaContext())) as Result;
        assert.equal(replay.headers!['idempotent-replayed'], 'true');
        assert.equal(replay.isBase64Encoded, true);
        assert.equal(replay.body, bytes.toString('base64'));
      });

      it('2.0: a handler returning a plain object is a 200 JSON body, as API Gateway sends it, and is replayed as one', async () => {
        const { store } = await table();
        const handler = withIdempotency<Queryable, ApiGatewayProxyEventV2>({ store }, async () => ({ id: 'ch_plain', ok: true }));
        const first = (await handler(fixture('function url'), lambdaContext())) as Result;
        assert.deepEqual([first.statusCode, first.headers!['content-type'], first.body], [200, 'application/json', '{"id":"ch_plain","ok":true}']);
        const replay = (await handler(fixture('function url'), lambdaContext())) as Result;
        assert.equal(replay.headers!['idempotent-replayed'], 'true');
        assert.equal(replay.body, first.body);
      });

      it("idem's problems come back in the event's format; a non-HTTP event passes through", async () => {
        const { store } = await table();
        // biome-ignore lint/suspicious/noExplicitAny: any event shape, as the test sends several
        const handler = withIdempotency<Queryable, any>({ store, required: true }, async (event, _c, idem) => ({
          statusCode: 200,
          body: idem ? 'protected' : `plain ${JSON.stringify(event)}`,
        }));
        const noKey = fixture<ApiGatewayProxyEventV1>('rest v1');
        delete noKey.headers!['Idempotency-Key'];
        delete noKey.multiValueHeaders!['Idempotency-Key'];
        const problem = (await handler(noKey, lambdaContext())) as Result;
        assert.equal(problem.statusCode, 400);
        assert.equal(problem.headers!['content-type'], 'application/problem+json');
        assert.equal(JSON.parse(problem.body!).type, 'urn:idem:problem:idempotency-key-missing');
        const sqs = (await handler({ Records: [] }, lambdaContext())) as Result;
        assert.equal(sqs.body, 'plain {"Records":[]}');
      });

      it('REST API (1.0): two Idempotency-Key lines in multiValueHeaders are rejected with 400', async () => {
        const { store } = await table();
        let H = 0;
        const handler = withIdempotency<Queryable, ApiGatewayProxyEventV1>({ store }, async () => (H++, { statusCode: 201, body: 'ran' }));
        const event = fixture<ApiGatewayProxyEventV1>('rest v1');
        event.multiValueHeaders!['Idempotency-Key'] = ['k-one', 'k-two'];
        const result = (await handler(event, lambdaContext())) as Result;
        assert.equal(result.statusCode, 400);
        assert.equal(JSON.parse(result.body!).type, 'urn:idem:problem:idempotency-key-invalid');
        assert.equal(H, 0);
      });
    });

    describe('the examples (examples/lambda/handler.ts, examples/lambda/middy.ts)', () => {
      for (const [style, make] of [
        ['wrapped handler', chargeHandler],
        ['Middy', middyChargeHandler],
      ] as const) {
        it(`${style}: the REST and HTTP API fixtures each create one charge and replay it; a bad amount is not stored`, async () => {
          const { store, table: t } = await table();
          const charges = tableName('charges');
          await migrateCharges(db.client() as SqlClient & Queryable, charges);
          db.cleanup(async () => void (await (db.client() as Queryable).query(`DROP TABLE IF EXISTS "${charges}"`)));
          const handler = make(store, charges) as (event: unknown, context: unknown) => Promise<Result>;
          for (const format of ['rest v1', 'http v2'] as const) {
            const first = await handler(fixture(format), lambdaContext());
            assert.equal(first.statusCode, 201, first.body);
            assert.equal(JSON.parse(first.body!).amount, 1000);
            const replay = await handler(fixture(format), lambdaContext());
            assert.equal(replay.headers!['idempotent-replayed'], 'true');
            assert.equal(replay.body, first.body);
            assert.equal(replay.headers!.location, first.headers!.location);
          }
          const bad = fixture<ApiGatewayProxyEventV2>('function url');
          bad.body = '{"amount":"lots"}';
          assert.equal((await handler(bad, lambdaContext())).statusCode, 400);
          assert.equal((await keyRows(db.client(), t)).length, 2, 'two charges, the 400 not stored');
          assert.equal(await countRows(db.client() as Queryable, charges), 2, 'one charge row per key');
        });
      }
    });

    describe('the lease from the remaining invocation time', () => {
      it('defaults to the remaining time + 1 s with no heartbeat: a retry during the invocation gets 409, never a takeover', { timeout: 30_000 }, async () => {
        const { store, table: t } = await table();
        const entered = deferred();
        const gate = deferred();
        let H = 0;
        const handler = withIdempotency<Queryable, ApiGatewayProxyEventV1>({ store }, async () => {
          H++;
          entered.resolve();
          await gate.promise;
          return { statusCode: 201, body: 'done' };
        });
        const running = handler(fixture('rest v1'), lambdaContext(4000));
        await entered.promise;
        const left = await leaseLeftMs(db.client(), t);
        assert.ok(left > 3000 && left <= 5000, `lease left ${left} ms for an invocation with 4000 ms left (+1000 margin)`);
        // Past what a 1 s lease would allow, the key is still held by the live invocation.
        await new Promise((r) => setTimeout(r, 1500));
        const retry = (await handler(fixture('rest v1'), lambdaContext(4000))) as Result;
        assert.equal(retry.statusCode, 409);
        assert.equal(JSON.parse(retry.body!).type, 'urn:idem:problem:request-in-progress');
        assert.ok(Number(retry.headers!['retry-after']) >= 1);
        gate.resolve();
        assert.equal(((await running) as Result).statusCode, 201);
        assert.equal(H, 1);
      });

      it('the bug the default avoids: a fixed lease shorter than the remaining time lets a retry take over the live invocation', {
        timeout: 30_000,
      }, async () => {
        const { store } = await table();
        const entered = deferred();
        const gate = deferred();
        let H = 0;
        const options: LambdaIdempotencyOptions<Queryable> = { store, leaseMs: 500, heartbeatMs: 0 };
        const handler = withIdempotency<Queryable, ApiGatewayProxyEventV1>(options, async () => {
          if (++H === 1) {
            entered.resolve();
            await gate.promise;
          }
          return { statusCode: 201, body: `run ${H}` };
        });
        const running = handler(fixture('rest v1'), lambdaContext(30_000));
        await entered.promise;
        await new Promise((r) => setTimeout(r, 800));
        const retry = (await handler(fixture('rest v1'), lambdaContext(30_000))) as Result;
        assert.equal(retry.statusCode, 201, 'the retry took over while the first invocation was still running');
        assert.equal(H, 2, 'the work ran twice');
        gate.resolve();
        const late = (await running) as Result;
        assert.equal(late.statusCode, 409, 'the first invocation lost its lease');
      });

      it('without a context (a local call) the configured or default lease applies', async () => {
        const { store, table: t } = await table();
        const entered = deferred();
        const gate = deferred();
        // biome-ignore lint/suspicious/noExplicitAny: the handler's result type is not what this test checks
        const handler = withIdempotency<Queryable, ApiGatewayProxyEventV1, any>({ store }, async () => {
          entered.resolve();
          await gate.promise;
          return { statusCode: 201, body: 'ok' };
        });
        const running = handler(fixture('rest v1'), {});
        await entered.promise;
        const left = await leaseLeftMs(db.client(), t);
        assert.ok(left > 50_000 && left <= 60_000, `the 60 s default lease (${left} ms left)`);
        gate.resolve();
        await running;
      });
    });

    describe('Middy middleware on @middy/core', () => {
      it('the handler sees context.idem; a retry returns early without running it; the replay is in the 1.0 format', async () => {
        const { store } = await table();
        let H = 0;
        const seen: Array<IdempotencyContext<Queryable> | undefined> = [];
        const handler = middy(async (event: ApiGatewayProxyEventV1, context: IdempotentLambdaContext<Queryable>) => {
          H++;
          seen.push(context.idem);
          const done = await context.idem!.phase('charged', async () => ({ id: 'ch_m' }));
          return { statusCode: 201, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...done, got: event.body }) };
        }).use(idempotency<Queryable>({ store }));
        const first = (await handler(fixture('rest v1'), lambdaContext() as never)) as Result;
        assert.equal(first.statusCode, 201);
        assert.equal(seen[0]?.key, '8e03978e-40d5-43e8-bc93-6894a57f9324');
        const replay = (await handler(fixture('rest v1'), lambdaContext() as never)) as Result;
        assert.equal(replay.statusCode, 201);
        assert.equal(replay.headers!['idempotent-replayed'], 'true');
        assert.equal(replay.body, first.body);
        assert.equal(H, 1);
      });

      it('a throw releases the lease at its recovery point and answers the 500 problem; the retry resumes', async () => {
        const { store, table: t } = await table();
        let crash = true;
        const runs = { a: 0 };
        const errors: unknown[] = [];
        const handler = middy(async (_event: ApiGatewayProxyEventV2, context: IdempotentLambdaContext<Queryable>) => {
          await context.idem!.phase('a', async () => ++runs.a);
          if (crash) {
            crash = false;
            throw new Error('downstream exploded');
          }
          return { statusCode: 201, body: 'done' };
        }).use(idempotency<Queryable>({ store, onHandlerError: (e) => errors.push(e) }));
        const failed = (await handler(fixture('http v2'), lambdaContext() as never)) as Result;
        assert.equal(failed.statusCode, 500);
        assert.equal(JSON.parse(failed.body!).type, 'urn:idem:problem:request-failed-retry');
        assert.equal(errors.length, 1);
        const [row] = await keyRows(db.client(), t);
        assert.deepEqual([row!.state, row!.recovery_point, row!.locked], ['started', 'a', false]);
        const retry = (await handler(fixture('http v2'), lambdaContext() as never)) as Result;
        assert.equal(retry.statusCode, 201);
        assert.equal(runs.a, 1, 'phase a did not run again');
      });

      it('after a JSON body parser (event.body already an object) the fingerprint equals the raw body’s: the plain wrapper replays it', async () => {
        const { store } = await table();
        let H = 0;
        const plain = withIdempotency<Queryable, ApiGatewayProxyEventV1>({ store }, async () => (H++, { statusCode: 201, body: 'created' }));
        const parsing = middy(async () => (H++, { statusCode: 201, body: 'again' }))
          .before(async (request) => {
            const event = request.event as { body: unknown };
            event.body = JSON.parse(event.body as string);
          })
          .use(idempotency<Queryable>({ store }));
        await plain(fixture('rest v1'), lambdaContext());
        const viaParser = (await parsing(fixture('rest v1'), lambdaContext() as never)) as Result;
        assert.equal(viaParser.headers!['idempotent-replayed'], 'true');
        assert.equal(viaParser.body, 'created');
        assert.equal(H, 1);
      });
    });
  });
}
