/**
 * The Drizzle example (examples/drizzle) as a real process on real sockets: a charge sent
 * twice replays byte for byte, the same charge sent concurrently runs once; each time one PSP
 * charge and one local charge row (written through Drizzle's `tx` in the phases). On embedded
 * PGlite always, and on PostgreSQL through node-postgres and postgres.js when DATABASE_URL is
 * set (a database of its own, dropped after).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type Reply, rand, request } from './helpers/payments/api.js';
import { type Backend, postgresBackend } from './helpers/payments/databases.js';
import { spawnTs, stopChild, type Child } from './helpers/process.js';

const T = { timeout: 180_000 };

interface Setup {
  name: string;
  env: () => Record<string, string>;
  backend?: Backend;
}

const setups: Setup[] = [{ name: 'PGlite', env: () => ({}) }];
if (process.env.DATABASE_URL) {
  for (const driver of ['node-postgres', 'postgres-js']) {
    const backend = postgresBackend(process.env.DATABASE_URL);
    let env: Record<string, string> = {};
    setups.push({
      name: `PostgreSQL via ${driver}`,
      backend: {
        ...backend,
        async setup() {
          await backend.setup();
          env = { ...backend.database().env, DRIZZLE_DRIVER: driver };
        },
      },
      env: () => env,
    });
  }
}

const charge = (base: string, key: string, customer: string) =>
  request(base, 'POST', '/v1/charges', {
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ amount: 1999, currency: 'usd', customer, metadata: { order: key } }),
  });

async function ledgers(base: string, customer: string) {
  const local = (await request(base, 'GET', `/v1/charges?customer=${customer}`)).json() as { data: Array<{ id: string; status: string; pspChargeId: string }> };
  const psp = (await request(base, 'GET', '/v1/psp/charges')).json() as { data: Array<{ id: string; customer: string }> };
  return { local: local.data, psp: psp.data.filter((c) => c.customer === customer) };
}

function assertReplay(res: Reply, first: Reply): void {
  assert.equal(res.status, first.status, res.body.toString());
  assert.equal(res.headers['idempotent-replayed'], 'true');
  assert.ok(res.body.equals(first.body), `replay body differs:\n${res.body}\nvs\n${first.body}`);
  assert.equal(res.headers.location, first.headers.location);
}

for (const setup of setups) {
  describe(`examples/drizzle on ${setup.name}`, () => {
    let server: Child;
    let base = '';
    before(async () => {
      await setup.backend?.setup();
      server = spawnTs('examples/drizzle/server.ts', { ...setup.env(), PORT: '0', HOST: '127.0.0.1', PSP_LATENCY_MS: '20' });
      base = (await server.waitFor(/listening on (http:\/\/127\.0\.0\.1:\d+)/))[1]!;
    });
    after(async () => {
      if (server) await stopChild(server);
      await setup.backend?.teardown();
    });

    test('a charge sent twice: 201, then a byte-identical replay; one PSP charge, one local row', T, async () => {
      const customer = `cus_${rand()}`;
      const key = `order-${rand()}`;
      const first = await charge(base, key, customer);
      assert.equal(first.status, 201, first.body.toString());
      assert.equal(first.headers['idempotent-replayed'], undefined);
      const body = first.json() as { id: string; status: string; psp_charge_id: string };
      assert.equal(body.status, 'succeeded');
      assertReplay(await charge(base, key, customer), first);

      const { local, psp } = await ledgers(base, customer);
      assert.equal(psp.length, 1, 'one PSP charge');
      assert.deepEqual(
        local.map((c) => [c.id, c.status, c.pspChargeId]),
        [[body.id, 'succeeded', psp[0]!.id]],
        'one local row, finished by the respond transaction',
      );
    });

    test('the same charge sent 8 times at once: one runs (others 409), one PSP charge, one local row; then a replay', T, async () => {
      const customer = `cus_${rand()}`;
      const key = `order-${rand()}`;
      const replies = await Promise.all(Array.from({ length: 8 }, () => charge(base, key, customer)));
      const statuses = replies.map((r) => r.status);
      assert.ok(
        statuses.every((s) => s === 201 || s === 409),
        `201 or 409 only: ${statuses}`,
      );
      // A duplicate can come after the first finished: it is then a replay (201) of it.
      const fresh = replies.filter((r) => r.status === 201 && r.headers['idempotent-replayed'] === undefined);
      assert.equal(fresh.length, 1, `exactly one execution: ${statuses}`);
      for (const r of replies) if (r.status === 201 && r !== fresh[0]) assertReplay(r, fresh[0]!);
      assertReplay(await charge(base, key, customer), fresh[0]!);

      const { local, psp } = await ledgers(base, customer);
      assert.equal(psp.length, 1, 'one PSP charge');
      assert.equal(local.length, 1, 'one local row');
      assert.equal(local[0]!.status, 'succeeded');
    });
  });
}
