/**
 * End to end, the example payments API (examples/payments): PSP failures and the official stripe SDK across a reset connection (scenarios 10-11).
 *
 * The real server runs as child processes (`node --import tsx examples/payments/server.ts`),
 * driven over real TCP connections, on embedded PGlite always and on PostgreSQL when
 * DATABASE_URL is set; see test/helpers/payments/ (suite.ts for the frame, databases.ts for the
 * backends). Tests isolate themselves by unique API keys, idempotency keys and customers, and
 * count PSP charges per customer through `GET /v1/psp/charges`. PGlite admits one process per
 * data directory, so there the local `charges` table is read directly only while no server has
 * the directory open, and two servers at once run on PostgreSQL only.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Stripe from 'stripe';
import {
  rand,
  request,
  postCharge,
  pspCharges,
  PROBLEM,
  assertProblem,
  assertCreated,
  assertReplayOf,
  retryUntilCreated,
  type ChargeBody,
  type PspCharge,
} from './helpers/payments/api.js';
import { startResetProxy } from './helpers/payments/reset-proxy.js';
import { paymentsSuite, T } from './helpers/payments/suite.js';

paymentsSuite('example payments API, end to end: psp', ({ backend, start, shared }) => {
  test('10. PSP failures (rate 0.5): 20 keys retried until 201 → 20 PSP charges, 20 rows, stable replays', T, async () => {
    const db = backend.database();
    const server = await start(db, { PSP_FAILURE_RATE: '0.5', PSP_LATENCY_MS: '10' });
    const apiKey = `sk_test_${rand()}`;
    const tag = rand();
    const keys = Array.from({ length: 20 }, (_, i) => ({ key: `flaky-${tag}-${i}`, customer: `cus_t10_${tag}_${i}`, amount: 100 + i }));
    let failures = 0;
    const results = await Promise.all(
      keys.map(async ({ key, customer, amount }) => {
        const body = { amount, currency: 'usd', customer };
        const { res } = await retryUntilCreated(
          () => postCharge(server, { apiKey, key, body }),
          (r, attempt) => {
            assertProblem(r, 500, PROBLEM + 'request-failed-retry', `${key} attempt ${attempt}:`);
            failures++;
          },
          30,
          60_000,
        );
        const charge = assertCreated(res);
        assert.equal(charge.amount, amount);
        for (let i = 0; i < 2; i++) assertReplayOf(await postCharge(server, { apiKey, key, body }), res, `${key} replay ${i}:`);
        return { key, customer, charge };
      }),
    );
    assert.ok(failures > 0, 'the PSP failed at least once (else this test proves nothing)');
    const res = await request(server.url, 'GET', '/v1/psp/charges');
    const psp = (res.json() as { data: PspCharge[] }).data.filter((c) => c.customer.startsWith(`cus_t10_${tag}_`));
    assert.equal(psp.length, 20, `exactly 20 PSP charges after ${failures} failures`);
    for (const { customer, charge } of results) {
      assert.deepEqual(
        psp.filter((c) => c.customer === customer).map((c) => c.id),
        [charge.psp_charge_id],
      );
    }

    await server.stop();
    const { rows } = await db.inspect({
      rows: { sql: `SELECT id, customer, status, psp_charge_id FROM charges WHERE customer LIKE $1`, params: [`cus_t10_${tag}_%`] },
    });
    assert.equal(rows.length, 20, 'exactly 20 local rows');
    const byCustomer = new Map(rows.map((r) => [r.customer, r]));
    for (const { customer, charge } of results) {
      const row = byCustomer.get(customer);
      assert.equal(row?.id, charge.id);
      assert.equal(row?.status, 'succeeded');
      assert.equal(row?.psp_charge_id, charge.psp_charge_id);
    }
  });

  test('11. the official stripe SDK: create, explicit key replay, invalid request, automatic key across a reset connection', T, async () => {
    const server = await shared();
    const config = { host: '127.0.0.1', port: server.port, protocol: 'http' as const, maxNetworkRetries: 3 };
    const apiKey = `sk_test_${rand()}`;
    const stripe = new Stripe(apiKey, config);

    const customer = `cus_t11_${rand()}`;
    const created = await stripe.charges.create({ amount: 1500, currency: 'usd', customer, metadata: { order: '11' } });
    assert.match(created.id, /^ch_/);
    assert.equal(created.amount, 1500);
    assert.equal(created.status, 'succeeded');
    assert.equal(created.metadata.order, '11');
    assert.equal(created.lastResponse.statusCode, 201);
    assert.equal((await pspCharges(server, customer)).length, 1);

    const customer2 = `cus_t11b_${rand()}`;
    const idempotencyKey = `sdk-${rand()}`;
    const params = { amount: 1600, currency: 'usd', customer: customer2, metadata: { order: '12' } };
    const one = await stripe.charges.create(params, { idempotencyKey });
    const two = await stripe.charges.create({ metadata: { order: '12' }, customer: customer2, currency: 'usd', amount: 1600 }, { idempotencyKey });
    assert.equal(two.id, one.id);
    assert.equal(one.lastResponse.headers['idempotent-replayed'], undefined);
    assert.equal(two.lastResponse.headers['idempotent-replayed'], 'true');
    assert.equal((await pspCharges(server, customer2)).length, 1);

    await assert.rejects(stripe.charges.create({ amount: -5, currency: 'usd', customer: customer2 }), (error: unknown) => {
      assert.ok(error instanceof Stripe.errors.StripeInvalidRequestError, `got ${String(error)}`);
      assert.equal(error.statusCode, 400);
      assert.equal(error.param, 'amount');
      return true;
    });
    // A reused key: 422 (idem's default) with Stripe's `idempotency_error` member. stripe-node
    // maps idempotency_error to StripeIdempotencyError only for 400/404, so this surfaces as
    // a StripeAPIError; it must not be retried (the SDK retries only 409 and 5xx).
    await assert.rejects(stripe.charges.create({ ...params, amount: 1601 }, { idempotencyKey }), (error: unknown) => {
      assert.ok(error instanceof Stripe.errors.StripeError, `got ${String(error)}`);
      assert.equal(error.statusCode, 422);
      assert.equal(error.rawType, 'idempotency_error');
      assert.equal(error.code, 'idempotency_key_reused');
      return true;
    });

    // The server commits, the proxy swallows its response and resets the connection: the
    // SDK retries with the same automatic key and gets the replay.
    const proxy = await startResetProxy(server.port);
    try {
      const viaProxy = new Stripe(apiKey, { ...config, port: proxy.port });
      const customer3 = `cus_t11c_${rand()}`;
      const charge = await viaProxy.charges.create({ amount: 1700, currency: 'usd', customer: customer3, metadata: { order: '13' } });
      const lost = await proxy.swallowed;
      assert.equal(lost.status, 201, 'the server committed the first attempt');
      assert.equal((JSON.parse(lost.body.toString()) as ChargeBody).id, charge.id, 'the SDK got the charge the lost response carried');
      assert.equal(charge.lastResponse.headers['idempotent-replayed'], 'true', 'the SDK result is the replay');
      const posts = proxy.requests.filter((r) => r.requestLine.startsWith('POST /v1/charges '));
      assert.ok(posts.length >= 2, `the SDK retried (${posts.length} POSTs)`);
      assert.match(posts[0]!.idempotencyKey ?? '', /^stripe-node-retry-[0-9a-f-]{36}$/);
      assert.ok(
        posts.every((p) => p.idempotencyKey === posts[0]!.idempotencyKey),
        `every attempt carried one key: ${posts.map((p) => p.idempotencyKey).join(', ')}`,
      );
      const psp = await pspCharges(server, customer3);
      assert.deepEqual(
        psp.map((c) => c.id),
        [(charge as unknown as ChargeBody).psp_charge_id],
        'exactly one PSP charge for that intent',
      );
    } finally {
      await proxy.close();
    }
  });
});
