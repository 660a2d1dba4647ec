/**
 * End to end, the example payments API (examples/payments): requests, replays, mismatches, tenants, form encoding, retention and request limits (scenarios 1-6, 13-15).
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
import { deriveKey } from '../src/core/derived-key.js';
import {
  rand,
  until,
  settle,
  postCharge,
  pspCharges,
  getCharge,
  assertLocalCharge,
  PROBLEM,
  assertProblem,
  assertCreated,
  assertFresh,
  assertReplayOf,
  retryUntilCreated,
  assertInProgress,
  type ChargeBody,
} from './helpers/payments/api.js';
import { localRows } from './helpers/payments/databases.js';
import { paymentsSuite, T } from './helpers/payments/suite.js';

/** PSP latency in test 3b: the first request stays in flight for half of it after its PSP charge shows. */
const PSP_3B_LATENCY_MS = 6000;

paymentsSuite('example payments API, end to end: api', ({ backend, start, shared, sharedDb, liveRows }) => {
  test('1. a new key creates a charge; the retry (JSON keys reordered) replays it byte for byte; one PSP charge', T, async () => {
    const server = await shared();
    const apiKey = `sk_test_${rand()}`;
    const key = `order-${rand()}`;
    const customer = `cus_t1_${rand()}`;
    const first = await postCharge(server, {
      apiKey,
      key,
      body: { amount: 1999, currency: 'USD', customer, metadata: { order: '1001' } },
    });
    const charge = assertFresh(first);
    assert.deepEqual(
      { amount: charge.amount, currency: charge.currency, customer: charge.customer, metadata: charge.metadata },
      { amount: 1999, currency: 'usd', customer, metadata: { order: '1001' } },
    );
    assert.equal(typeof charge.created, 'number');

    const retry = await postCharge(server, {
      apiKey,
      key,
      body: `{ "metadata": {"order": "1001"}, "customer": ${JSON.stringify(customer)},\n  "currency": "USD", "amount": 1999.0 }`,
    });
    assertReplayOf(retry, first);

    const psp = await pspCharges(server, customer);
    assert.equal(psp.length, 1, 'exactly one PSP charge');
    assert.equal(psp[0]!.id, charge.psp_charge_id);
    assert.equal(psp[0]!.amount, 1999);
    assert.notEqual(psp[0]!.idempotency_key, key, 'the PSP gets a derived key, not the client key');

    await assertLocalCharge(server, apiKey, charge);
    const rows = await liveRows(customer);
    if (rows)
      assert.deepEqual(
        rows.map((r) => [r.id, r.status]),
        [[charge.id, 'succeeded']],
        'exactly one local row',
      );
  });

  test('2. 50 parallel identical requests: 201 or 409 (with Retry-After), one PSP charge, one local row; then a replay', T, async () => {
    const server = await shared();
    const apiKey = `sk_test_${rand()}`;
    const key = `burst-${rand()}`;
    const customer = `cus_t2_${rand()}`;
    const body = { amount: 4200, currency: 'eur', customer };
    const answers = await Promise.all(Array.from({ length: 50 }, () => postCharge(server, { apiKey, key, body })));

    const statuses = answers.map((r) => r.status);
    for (const res of answers) {
      if (res.status === 409) {
        assertInProgress(res);
        // The default Retry-After is 1 s (the lease left is ~60 s on this server).
        assert.equal(res.headers['retry-after'], '1', 'Retry-After of an in-progress 409');
      } else assert.equal(res.status, 201, `unexpected ${res.status}: ${res.body.toString()}`);
    }
    const created = answers.filter((r) => r.status === 201);
    const fresh = created.filter((r) => r.headers['idempotent-replayed'] === undefined);
    assert.equal(fresh.length, 1, `exactly one request executed (statuses ${statuses.join(',')})`);
    for (const res of created) if (res !== fresh[0]) assertReplayOf(res, fresh[0]!);
    assert.ok(statuses.includes(409), 'with 300 ms of PSP latency some duplicates must see the request in progress');

    const retry = await postCharge(server, { apiKey, key, body });
    assertReplayOf(retry, fresh[0]!);
    const charge = assertCreated(fresh[0]!);
    const psp = await pspCharges(server, customer);
    assert.deepEqual(
      psp.map((c) => c.id),
      [charge.psp_charge_id],
      'exactly one PSP charge',
    );

    await assertLocalCharge(server, apiKey, charge);
    const rows = await liveRows(customer);
    if (rows)
      assert.deepEqual(
        rows.map((r) => [r.id, r.status]),
        [[charge.id, 'succeeded']],
        'exactly one local row',
      );
  });

  test('3a. the same key with a different amount gets a 422 problem; the original still replays', T, async () => {
    const server = await shared();
    const apiKey = `sk_test_${rand()}`;
    const key = `mismatch-${rand()}`;
    const customer = `cus_t3a_${rand()}`;
    const first = await postCharge(server, { apiKey, key, body: { amount: 1000, currency: 'usd', customer } });
    assertFresh(first);
    const other = await postCharge(server, { apiKey, key, body: { amount: 2000, currency: 'usd', customer } });
    const problem = assertProblem(other, 422, PROBLEM + 'idempotency-key-reused');
    assert.equal((problem.error as { type?: string } | undefined)?.type, 'idempotency_error', 'Stripe-style error member');
    assertReplayOf(await postCharge(server, { apiKey, key, body: { amount: 1000, currency: 'usd', customer } }), first);
    assert.equal((await pspCharges(server, customer)).length, 1);
  });

  test('3b. a different amount while the first request is in flight gets 422, not 409; the original still replays', T, async () => {
    const db = backend.database();
    const server = await start(db, { PSP_LATENCY_MS: String(PSP_3B_LATENCY_MS) });
    const apiKey = `sk_test_${rand()}`;
    const key = `inflight-${rand()}`;
    const customer = `cus_t3b_${rand()}`;
    const body = { amount: 1000, currency: 'usd', customer };
    const firstP = settle(postCharge(server, { apiKey, key, body }));
    // Nothing else may touch the key until the first request provably holds it: a probe with
    // the same key sent too early could claim the key itself (it raced the first request and
    // won ~50% of the time under load). The fake PSP records its charge halfway through its
    // latency, and only an execution holding the key calls the PSP; so once this customer's
    // PSP charge is visible, the first request (the only one sent) has claimed the key and
    // stays in flight for another PSP_3B_LATENCY_MS / 2. Works on PGlite too, where the test
    // cannot read the server's database while it runs.
    await until(
      'the first request to reach the PSP',
      () => pspCharges(server, customer),
      (c) => c.length === 1,
      20_000,
      20,
    );
    assertInProgress(await postCharge(server, { apiKey, key, body }), 'the first request must still be running:');
    const mismatch = await postCharge(server, { apiKey, key, body: { ...body, amount: 1001 } });
    assertProblem(mismatch, 422, PROBLEM + 'idempotency-key-reused', 'mismatch while in flight:');
    // Still in flight after the 422: the mismatch was judged while the first was running.
    assertInProgress(await postCharge(server, { apiKey, key, body }), 'still in flight:');

    const first = await firstP;
    assert.ok(first.ok, `first request failed: ${String(!first.ok && first.error)}`);
    const charge = assertFresh(first.value);
    assert.equal(charge.amount, 1000);
    assertReplayOf(await postCharge(server, { apiKey, key, body }), first.value);
    assertProblem(await postCharge(server, { apiKey, key, body: { ...body, amount: 1001 } }), 422, PROBLEM + 'idempotency-key-reused');
    assert.equal((await pspCharges(server, customer)).length, 1);
    await server.stop();
  });

  test('4. missing key → 400; missing auth → 401 without consuming the key; invalid body → 400 without consuming the key', T, async () => {
    const server = await shared();
    const apiKey = `sk_test_${rand()}`;
    const customer = `cus_t4_${rand()}`;
    const body = { amount: 300, currency: 'usd', customer };

    assertProblem(await postCharge(server, { apiKey, key: null, body }), 400, PROBLEM + 'idempotency-key-missing');
    assert.equal((await pspCharges(server, customer)).length, 0, 'nothing ran without a key');

    const keyA = `auth-${rand()}`;
    const unauthenticated = await postCharge(server, { apiKey: null, key: keyA, body });
    assert.equal(unauthenticated.status, 401, unauthenticated.body.toString());
    assert.match(String(unauthenticated.headers['www-authenticate']), /^Bearer/);
    assert.equal((unauthenticated.json() as { status: number }).status, 401);
    assert.equal((await pspCharges(server, customer)).length, 0, 'nothing ran without credentials');
    const authenticated = await postCharge(server, { apiKey, key: keyA, body });
    const chargeA = assertFresh(authenticated, 'after a 401 the key is fresh:');
    assert.equal((await pspCharges(server, customer)).length, 1);

    const keyB = `invalid-${rand()}`;
    const customerB = `cus_t4b_${rand()}`;
    const invalid: Array<[unknown, string | undefined]> = [
      [{ amount: 0, currency: 'usd', customer: customerB }, 'amount'],
      [{ amount: 12.5, currency: 'usd', customer: customerB }, 'amount'],
      [{ amount: 500, currency: 'us', customer: customerB }, 'currency'],
      [{ amount: 500, currency: 'usd' }, 'customer'],
      [{ amount: 500, currency: 'usd', customer: customerB, color: 'red' }, 'color'],
      ['{"amount": 500, "currency": ', undefined],
    ];
    for (const [bad, param] of invalid) {
      const res = await postCharge(server, { apiKey, key: keyB, body: bad });
      const problem = assertProblem(res, 400, 'urn:idem:example:payments:invalid-request', `invalid body ${JSON.stringify(bad)}:`);
      if (param) assert.equal((problem.error as { param?: string }).param, param);
    }
    const fixed = await postCharge(server, { apiKey, key: keyB, body: { amount: 500, currency: 'usd', customer: customerB } });
    const chargeB = assertFresh(fixed, 'the fixed body with the same key runs:');
    assert.notEqual(chargeB.id, chargeA.id);
    assertReplayOf(await postCharge(server, { apiKey, key: keyB, body: { amount: 500, currency: 'usd', customer: customerB } }), fixed);
    assert.equal((await pspCharges(server, customerB)).length, 1);
  });

  test('5. two tenants with the same key and body get two charges, two PSP charges, each replays its own', T, async () => {
    const server = await shared();
    const alice = `sk_test_alice_${rand()}`;
    const bob = `sk_test_bob_${rand()}`;
    const key = `shared-key-${rand()}`;
    const customer = `cus_t5_${rand()}`;
    const body = { amount: 777, currency: 'usd', customer };
    const [a, b] = await Promise.all([postCharge(server, { apiKey: alice, key, body }), postCharge(server, { apiKey: bob, key, body })]);
    const chargeA = assertFresh(a!, 'alice:');
    const chargeB = assertFresh(b!, 'bob:');
    assert.notEqual(chargeA.id, chargeB.id);
    assert.notEqual(chargeA.psp_charge_id, chargeB.psp_charge_id);
    const psp = await pspCharges(server, customer);
    assert.equal(psp.length, 2);
    assert.equal(new Set(psp.map((c) => c.idempotency_key)).size, 2, 'derived PSP keys differ per tenant');

    assertReplayOf(await postCharge(server, { apiKey: alice, key, body }), a!, 'alice replay:');
    assertReplayOf(await postCharge(server, { apiKey: bob, key, body }), b!, 'bob replay:');
    assert.equal((await getCharge(server, bob, chargeA.id)).status, 404, "bob cannot read alice's charge");
    assert.equal((await getCharge(server, alice, chargeA.id)).status, 200);
    assert.equal((await pspCharges(server, customer)).length, 2);
  });

  test('6. Stripe form encoding with metadata[order]=42; reordered fields with the same key replay', T, async () => {
    const server = await shared();
    const apiKey = `sk_test_${rand()}`;
    const key = `form-${rand()}`;
    const customer = `cus_t6_${rand()}`;
    const form = 'application/x-www-form-urlencoded';
    const first = await postCharge(server, {
      apiKey,
      key,
      contentType: form,
      body: `amount=500&currency=usd&customer=${customer}&metadata[order]=42`,
    });
    const charge = assertFresh(first);
    assert.equal(charge.amount, 500);
    assert.equal(charge.currency, 'usd');
    assert.deepEqual(charge.metadata, { order: '42' });

    const reordered = await postCharge(server, {
      apiKey,
      key,
      contentType: `${form}; charset=utf-8`,
      body: `metadata%5Border%5D=42&customer=${customer}&currency=usd&amount=500`,
    });
    assertReplayOf(reordered, first);
    const changed = await postCharge(server, {
      apiKey,
      key,
      contentType: form,
      body: `amount=500&currency=usd&customer=${customer}&metadata[order]=43`,
    });
    assertProblem(changed, 422, PROBLEM + 'idempotency-key-reused');
    assert.equal((await pspCharges(server, customer)).length, 1);
    const got = await getCharge(server, apiKey, charge.id);
    assert.deepEqual((got.json() as ChargeBody).metadata, { order: '42' });
  });

  test('13. a key reused after retention makes a new charge and a new PSP charge (a new derived key), then replays that', T, async () => {
    const db = backend.database();
    // With the heartbeat on, retention must exceed maxExecutionMs (10 × lease) + lease.
    const server = await start(db, { IDEM_LEASE_MS: '200', IDEM_RETENTION_MS: '2500' });
    const apiKey = `sk_test_${rand()}`;
    const key = `reused-${rand()}`;
    const customer = `cus_t13_${rand()}`;
    const body = { amount: 1300, currency: 'usd', customer };
    // Retention counts from the claim, which happens after this instant (one clock: same host).
    const sentAt = Date.now();
    const firstRes = await postCharge(server, { apiKey, key, body });
    const first = assertFresh(firstRes, 'first use:');
    // Within retention the key replays; past it, the same request runs again.
    const { res: secondRes } = await retryUntilCreated(
      async () => {
        const res = await postCharge(server, { apiKey, key, body });
        if (res.status === 201 && res.headers['idempotent-replayed'] === 'true') {
          assertReplayOf(res, firstRes, 'within retention:');
          return { ...res, status: 299 }; // keep polling
        }
        return res;
      },
      (res) => assert.equal(res.status, 299, `within retention only replays: ${res.status} ${res.body.toString()}`),
      100,
      20_000,
    );
    assert.ok(Date.now() - sentAt >= 2400, `the key was reclaimed only once retention had run out (after ${Date.now() - sentAt} ms)`);
    const second = assertFresh(secondRes, 'the key reused past retention:');
    assert.notEqual(second.id, first.id, 'a new local charge');
    assert.notEqual(second.psp_charge_id, first.psp_charge_id, 'a new PSP charge, not the old one replayed by the PSP');
    const psp = await pspCharges(server, customer);
    assert.deepEqual(psp.map((c) => c.id).sort(), [first.psp_charge_id, second.psp_charge_id].sort(), 'two PSP charges for this customer');
    assert.notEqual(psp[0]!.idempotency_key, psp[1]!.idempotency_key, 'the two claims derived different PSP keys');
    assertReplayOf(await postCharge(server, { apiKey, key, body }), secondRes, 'the new charge replays:');
    await assertLocalCharge(server, apiKey, first);
    await assertLocalCharge(server, apiKey, second);

    await server.stop();
    const after = await db.inspect({
      rows: localRows(customer),
      key: { sql: `SELECT scope, claim_id::text AS claim_id FROM idempotency_keys WHERE key = $1`, params: [key] },
    });
    assert.deepEqual(after.rows.map((r) => r.id).sort(), [first.id, second.id].sort(), 'two local rows for the one key');
    const [row] = after.key;
    const secondPsp = psp.find((c) => c.id === second.psp_charge_id)!;
    assert.equal(secondPsp.idempotency_key, deriveKey(String(row!.scope), key, String(row!.claim_id), 'psp_charged'), "the new PSP key is the new claim's");
  });

  test('14. a body over 64 KiB gets 413 and leaves nothing stored; the same key then works', T, async () => {
    const server = await shared();
    const apiKey = `sk_test_${rand()}`;
    const customer = `cus_t14_${rand()}`;
    const big = { amount: 1400, currency: 'usd', customer, metadata: { pad: 'x'.repeat(100_000) } };
    const keys = { sized: `large-${rand()}`, chunked: `large-chunked-${rand()}` };
    for (const [how, key] of Object.entries(keys)) {
      const res = await postCharge(server, { apiKey, key, body: big, chunked: how === 'chunked' });
      assertProblem(res, 413, 'urn:idem:example:payments:too-large', `${how} 100 KB body:`);
      if (backend.multiProcess) {
        const { rows } = await sharedDb().inspect({ rows: { sql: `SELECT state FROM idempotency_keys WHERE key = $1`, params: [key] } });
        assert.deepEqual(rows, [], `${how}: a 413 stores no idempotency key`);
      }
    }
    assert.equal((await pspCharges(server, customer)).length, 0, 'nothing ran');
    // Had idem stored the large request (in any state), this request would get 409 or 422.
    for (const [how, key] of Object.entries(keys)) {
      const small = { amount: 1400, currency: 'usd', customer, metadata: { how } };
      assertFresh(await postCharge(server, { apiKey, key, body: small }), `${how}: the key is still free:`);
    }
    assert.equal((await pspCharges(server, customer)).length, 2);
  });

  test('15. too many form parameters and metadata over the limits get 400 without consuming the key', T, async () => {
    const server = await shared();
    const apiKey = `sk_test_${rand()}`;
    const key = `limits-${rand()}`;
    const customer = `cus_t15_${rand()}`;
    const form = 'application/x-www-form-urlencoded';
    const params101 = [`amount=500`, `currency=usd`, `customer=${customer}`, ...Array.from({ length: 98 }, (_, i) => `metadata[k${i}]=v`)].join('&');
    const tooMany = await postCharge(server, { apiKey, key, contentType: form, body: params101 });
    const p1 = assertProblem(tooMany, 400, 'urn:idem:example:payments:invalid-request', '101 form parameters:');
    assert.match(String(p1.detail), /Too many form parameters/);

    const keysOf = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v']));
    const invalid: Array<[string, Record<string, string>, string]> = [
      ['51 metadata keys', keysOf(51), 'metadata'],
      ['a 41-character metadata key', { ['k'.repeat(41)]: 'v' }, `metadata[${'k'.repeat(41)}]`],
      ['a 501-character metadata value', { note: 'v'.repeat(501) }, 'metadata[note]'],
    ];
    for (const [what, metadata, param] of invalid) {
      const res = await postCharge(server, { apiKey, key, body: { amount: 500, currency: 'usd', customer, metadata } });
      const problem = assertProblem(res, 400, 'urn:idem:example:payments:invalid-request', `${what}:`);
      assert.equal((problem.error as { param?: string }).param, param, what);
    }
    assert.equal((await pspCharges(server, customer)).length, 0, 'nothing ran');
    // At the limits exactly: 50 keys, a 40-character key, a 500-character value; same key.
    const metadata = { ...keysOf(48), ['k'.repeat(40)]: 'v', note: 'v'.repeat(500) };
    const ok = await postCharge(server, { apiKey, key, body: { amount: 500, currency: 'usd', customer, metadata } });
    const charge = assertFresh(ok, 'the key is still free after the 400s:');
    assert.deepEqual(charge.metadata, metadata);
    // The form parser accepts exactly 100 parameters (the 400 above is then about metadata, not the count).
    const params100 = params101.split('&').slice(0, 100).join('&');
    const hundred = assertProblem(
      await postCharge(server, { apiKey, key: `limits-100-${rand()}`, contentType: form, body: params100 }),
      400,
      'urn:idem:example:payments:invalid-request',
      '100 form parameters:',
    );
    assert.doesNotMatch(String(hundred.detail), /Too many form parameters/);
    assert.equal((await pspCharges(server, customer)).length, 1);
  });
});
