// Run by scripts/pack/examples.sh (from scripts/check-pack.sh) with tsx inside a scratch project
// that installed the packed tarball, the frameworks and their own type packages, with examples/
// copied in: each example, as a user would run it, on an in-memory PGlite (Redis and the brokers
// only when REDIS_URL, AMQP_URL, NATS_URL are set), must
//   - answer the same request twice with the same response, the second marked as a replay,
//   - answer the same key with another body with 422 (a consumer: dead-letter it as a mismatch),
//   - make one effect (one row) for concurrent duplicates.
// Usage: npx tsx examples-run.ts [name ...]  (default: every example whose service is there)
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PGlite } from '@electric-sql/pglite';

type Db = PGlite;
interface Answer {
  status: number;
  replayed: boolean;
  body: string;
}
/** One example, started: how to send it one request (or message), and how many effects it made. */
interface Target {
  send(key: string, body: unknown): Promise<Answer>;
  /** `n` copies at once (over HTTP: on connections opened first, so they arrive together). */
  burst?(key: string, body: unknown, n: number): Promise<Answer[]>;
  /** Rows the example wrote; without it, the answers that were not replays are counted. */
  effects?(): Promise<number>;
  close(): Promise<void>;
}

const suffix = () => randomBytes(4).toString('hex');
const count = async (db: Db, table: string) => Number((await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${table}"`)).rows[0]!.n);

/** Replay, 422, and one effect under concurrent duplicates, for an HTTP-like target. */
async function checkRequests(name: string, target: Target, body: object, changed: object): Promise<void> {
  let fresh = 0;
  const send = async (key: string, b: unknown) => {
    const answer = await target.send(key, b);
    if (answer.status < 300 && !answer.replayed) fresh++;
    return answer;
  };
  const effects = async () => (target.effects ? target.effects() : fresh);
  const key = randomUUID();
  const first = await send(key, body);
  assert.equal(first.status, 201, `${name}: first request ${first.status} ${first.body}`);
  assert.equal(first.replayed, false);
  const again = await send(key, body);
  assert.equal(again.replayed, true, `${name}: the same request again is a replay`);
  assert.deepEqual([again.status, again.body], [first.status, first.body], `${name}: the replay is the first answer`);
  const other = await send(key, changed);
  assert.equal(other.status, 422, `${name}: the same key with another body is 422 (${other.body})`);
  assert.equal(await effects(), 1, `${name}: one effect for the first key`);

  const concurrent = randomUUID();
  const answers = target.burst ? await target.burst(concurrent, body, 8) : await Promise.all(Array.from({ length: 8 }, () => target.send(concurrent, body)));
  fresh += answers.filter((a) => a.status < 300 && !a.replayed).length;
  for (const a of answers) assert.ok(a.status === 201 || a.status === 409, `${name}: a concurrent duplicate got ${a.status} ${a.body}`);
  const done = answers.filter((a) => a.status === 201);
  assert.ok(done.length >= 1, `${name}: one of the concurrent duplicates ran`);
  assert.equal(new Set(done.map((a) => a.body)).size, 1, `${name}: every 201 of the concurrent duplicates is the same answer`);
  const settled = await send(concurrent, body);
  assert.equal(settled.replayed, true, `${name}: after the duplicates, a replay`);
  assert.equal(await effects(), 2, `${name}: one effect for the concurrent duplicates`);
  console.log(
    `${name}: replay, 422 for another body, one effect for ${answers.length} concurrent duplicates (${done.length} × 201, ${answers.length - done.length} × 409)`,
  );
}

/** Runs `work` while a transaction on `db` stays open until `until` settles. */
async function holding<T>(db: PGlite, until: Promise<void>, work: () => Promise<T>): Promise<T> {
  let entered!: () => void;
  const inside = new Promise<void>((resolve) => (entered = resolve));
  const held = db.transaction(async () => {
    entered();
    await until;
  });
  await inside;
  try {
    return await work();
  } finally {
    await held;
  }
}

/** A Node server (listening or not) on 127.0.0.1, port 0, over `db`, as a target that POSTs JSON to `path`. */
async function overHttp(server: Server, path: string, db: PGlite): Promise<Pick<Target, 'send' | 'burst' | 'close'>> {
  server.keepAliveTimeout = 0;
  if (!server.listening) await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}${path}`;
  const send = async (key: string, body: unknown): Promise<Answer> => {
    const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: JSON.stringify(body) });
    return { status: response.status, replayed: response.headers.get('idempotent-replayed') === 'true', body: await response.text() };
  };
  return {
    send,
    burst: async (key, body, n) => {
      // PGlite runs one transaction at a time: held open until the server has all n requests,
      // it keeps the first from finishing before the others claim, so they overlap for real.
      let seen = 0;
      let arrived!: () => void;
      const all = new Promise<void>((resolve) => (arrived = resolve));
      const onRequest = () => ++seen === n && arrived();
      server.on('request', onRequest);
      try {
        return await holding(db, all, () => Promise.all(Array.from({ length: n }, () => send(key, body))));
      } finally {
        server.off('request', onRequest);
      }
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const order = { total: 1200 };
const charge = { amount: 1200 };

const examples: Record<string, { needs?: string; run(db: Db): Promise<void> }> = {
  hono: {
    async run(db) {
      const { serve } = await import('@hono/node-server');
      const { createApp } = await import('./examples/hono/app.js');
      const orders = `orders_${suffix()}`;
      const app = await createApp({ db, table: `idem_${suffix()}`, orders });
      const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }) as Server;
      await new Promise((resolve) => server.once('listening', resolve));
      const target = await overHttp(server, '/v1/orders', db);
      await checkRequests('hono', { ...target, effects: () => count(db, orders) }, order, { total: 1300 });
      await target.close();
    },
  },
  express: {
    async run(db) {
      const { createApp } = await import('./examples/express/app.js');
      const orders = `orders_${suffix()}`;
      const app = await createApp({ db, table: `idem_${suffix()}`, orders });
      const target = await overHttp(app.listen(0, '127.0.0.1'), '/v1/orders', db);
      await checkRequests('express', { ...target, effects: () => count(db, orders) }, { sku: 'A-1', quantity: 2 }, { sku: 'A-1', quantity: 3 });
      await target.close();
    },
  },
  fastify: {
    async run(db) {
      const { buildApp } = await import('./examples/fastify/app.js');
      const orders = `orders_${suffix()}`;
      const app = await buildApp({ db, table: `idem_${suffix()}`, orders });
      await app.listen({ port: 0, host: '127.0.0.1' });
      await checkRequests('fastify', { ...(await overHttp(app.server, '/v1/orders', db)), effects: () => count(db, orders) }, order, { total: 1300 });
      await app.close();
    },
  },
  koa: {
    async run(db) {
      const { createApp } = await import('./examples/koa/app.js');
      const charges = `charges_${suffix()}`;
      const app = await createApp({ db, table: `idem_${suffix()}`, charges });
      const target = await overHttp(app.listen(0, '127.0.0.1'), '/v1/charges', db);
      await checkRequests('koa', { ...target, effects: () => count(db, charges) }, charge, { amount: 1300 });
      await target.close();
    },
  },
  nestjs: {
    async run(db) {
      const { Logger } = await import('@nestjs/common');
      const { bootstrap } = await import('./examples/nestjs/main.js');
      Logger.overrideLogger(false);
      for (const platform of ['express', 'fastify'] as const) {
        const orders = `orders_${suffix()}`;
        const app = await bootstrap(db, platform, `idem_${suffix()}`, orders);
        await app.listen(0, '127.0.0.1');
        const target = await overHttp(app.getHttpServer(), '/v1/orders', db);
        await checkRequests(`nestjs (${platform})`, { ...target, effects: () => count(db, orders) }, order, { total: 1300 });
        await app.close();
      }
    },
  },
  next: {
    async run() {
      // The route handler as Next calls it (Next's build is not needed for that): a Request and
      // the route's second argument. lib/store.ts opens its own PGlite (DATABASE_URL unset for it).
      process.env.IDEM_TABLE = `idem_${suffix()}`;
      delete process.env.DATABASE_URL;
      const { POST } = await import('./examples/next/app/api/charges/route.js');
      await checkRequests(
        'next',
        {
          send: async (key, body) => {
            const init = { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: JSON.stringify(body) };
            const { NextRequest } = await import('next/server.js');
            const response = await POST(new NextRequest('http://localhost/api/charges', init), { params: Promise.resolve({}) });
            return { status: response.status, replayed: response.headers.get('idempotent-replayed') === 'true', body: await response.text() };
          },
          close: async () => undefined,
        },
        charge,
        { amount: 1300 },
      );
    },
  },
  lambda: {
    async run(db) {
      const { PostgresStore } = await import('idem/postgres');
      const { migrateCharges } = await import('./examples/lambda/charge.js');
      const { chargeHandler } = await import('./examples/lambda/handler.js');
      const { middyChargeHandler } = await import('./examples/lambda/middy.js');
      for (const [style, make] of [
        ['lambda', chargeHandler],
        ['lambda (middy)', middyChargeHandler],
      ] as const) {
        const table = `idem_${suffix()}`;
        const charges = `charges_${suffix()}`;
        const store = new PostgresStore({ client: db, table });
        await store.migrate();
        await migrateCharges(db, charges);
        const handler = make(store, charges) as unknown as (
          event: unknown,
          context: unknown,
        ) => Promise<{ statusCode: number; headers?: Record<string, string>; body?: string }>;
        const deadline = Date.now() + 30_000;
        const context = { functionName: 'charges', awsRequestId: randomUUID(), getRemainingTimeInMillis: () => deadline - Date.now() };
        const event = (key: string, body: unknown) => ({
          version: '2.0',
          routeKey: 'POST /v1/charges',
          rawPath: '/v1/charges',
          rawQueryString: '',
          headers: { 'content-type': 'application/json', 'idempotency-key': key },
          requestContext: { http: { method: 'POST', path: '/v1/charges' }, stage: '$default' },
          body: JSON.stringify(body),
          isBase64Encoded: false,
        });
        await checkRequests(
          style,
          {
            send: async (key, body) => {
              const result = await handler(event(key, body), context);
              return { status: result.statusCode, replayed: result.headers?.['idempotent-replayed'] === 'true', body: result.body ?? '' };
            },
            effects: () => count(db, charges),
            close: async () => undefined,
          },
          charge,
          { amount: 1300 },
        );
      }
    },
  },
  redis: {
    needs: 'REDIS_URL',
    async run(db) {
      const { serve } = await import('@hono/node-server');
      const { Redis } = await import('ioredis');
      const { createApp } = await import('./examples/redis/app.js');
      const redis = new Redis(process.env.REDIS_URL!);
      const prefix = `idem-examples-${suffix()}`;
      const orders = `orders_${suffix()}`;
      const app = await createApp({ redis, db, prefix, ledger: `phases_${suffix()}`, orders });
      const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }) as Server;
      await new Promise((resolve) => server.once('listening', resolve));
      const target = await overHttp(server, '/v1/orders', db);
      try {
        await checkRequests('redis', { ...target, effects: () => count(db, orders) }, order, { total: 1300 });
      } finally {
        await target.close();
        let cursor = '0';
        do {
          const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
          if (keys.length) await redis.del(...keys);
          cursor = next;
        } while (cursor !== '0');
        redis.disconnect();
      }
    },
  },
  amqp: {
    needs: 'AMQP_URL',
    async run(db) {
      const { default: amqplib } = await import('amqplib');
      const { startConsumer } = await import('./examples/amqp/consumer.js');
      const connection = await amqplib.connect(process.env.AMQP_URL!);
      const channel = await connection.createConfirmChannel();
      const queue = `order-placed-${suffix()}`;
      const invoices = `invoices_${suffix()}`;
      const outcomes = new Map<string, string[]>();
      const consuming = await startConsumer({
        channel,
        db,
        queue,
        table: `idem_${suffix()}`,
        invoices,
        onDisposition: (d, m) => outcomes.set(m.id, [...(outcomes.get(m.id) ?? []), `${d.action}:${d.reason}`]),
      });
      const publish = (id: string, amount: number) =>
        channel.sendToQueue(queue, Buffer.from(JSON.stringify({ orderId: id, amount })), { messageId: id, contentType: 'application/json' });
      const of = (id: string, outcome: string) => (outcomes.get(id) ?? []).filter((o) => o === outcome).length;
      const until = async (done: () => boolean, what: string) => {
        for (const started = Date.now(); !done(); ) {
          assert.ok(Date.now() - started < 30_000, `amqp: ${what} after 30 s: ${JSON.stringify([...outcomes])}`);
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      };
      try {
        // A copy that finds the first in progress is retried through the retry queue until the
        // first is finished; then it is acked as a duplicate.
        const first = randomUUID();
        publish(first, 1200);
        publish(first, 1200);
        await channel.waitForConfirms();
        await until(() => of(first, 'ack:processed') + of(first, 'ack:duplicate') === 2, 'the message and its copy');
        assert.equal(of(first, 'ack:duplicate'), 1, 'amqp: the copy is acked as a duplicate');
        publish(first, 1300); // the same id with another body
        await channel.waitForConfirms();
        await until(() => of(first, 'dead-letter:mismatch') === 1, 'the same id with another body dead-lettered');
        const concurrent = randomUUID();
        for (let i = 0; i < 8; i++) publish(concurrent, 1200);
        await channel.waitForConfirms();
        await until(() => of(concurrent, 'ack:processed') + of(concurrent, 'ack:duplicate') === 8, 'eight concurrent copies acked');
        assert.equal(of(concurrent, 'ack:processed'), 1, 'amqp: one of the concurrent copies ran');
        assert.equal(await count(db, invoices), 2, 'amqp: one invoice per message id');
        const retried = of(concurrent, 'retry:in-progress');
        console.log(`amqp: duplicate acked, another body dead-lettered, one invoice for 8 concurrent copies (${retried} retried while in progress)`);
      } finally {
        await consuming.stop();
        for (const q of [queue, `${queue}.idem-retry`]) await channel.deleteQueue(q);
        await connection.close();
      }
    },
  },
  nats: {
    needs: 'NATS_URL',
    async run(db) {
      const { connect, headers } = await import('@nats-io/transport-node');
      const { jetstream, jetstreamManager } = await import('@nats-io/jetstream');
      const { startConsumer } = await import('./examples/nats/consumer.js');
      const nc = await connect({ servers: process.env.NATS_URL! });
      const js = jetstream(nc);
      const jsm = await jetstreamManager(nc);
      const stream = `order-placed-${suffix()}`;
      const invoices = `invoices_${suffix()}`;
      const outcomes: string[] = [];
      const consuming = await startConsumer({
        js,
        jsm,
        db,
        stream,
        table: `idem_${suffix()}`,
        invoices,
        onDisposition: (d) => outcomes.push(`${d.action}:${d.reason}`),
      });
      // Copies share the Nats-Msg-Id: JetStream drops those it sees within its duplicate window,
      // idem acks any that reach the consumer as duplicates; either way one invoice per order.
      const publish = (id: string, amount: number) => {
        const h = headers();
        h.set('Nats-Msg-Id', id);
        return js.publish(stream, JSON.stringify({ orderId: id, amount }), { headers: h });
      };
      try {
        const first = randomUUID();
        await publish(first, 1200);
        await publish(first, 1200);
        await publish(first, 1300); // the same id with another body: never a second invoice
        const concurrent = randomUUID();
        await Promise.all(Array.from({ length: 8 }, () => publish(concurrent, 1200)));
        for (const started = Date.now(); outcomes.filter((o) => o === 'ack:processed').length < 2; ) {
          assert.ok(Date.now() - started < 30_000, `nats: deliveries after 30 s: ${outcomes.join(', ')}`);
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        const { rows } = await db.query<{ order_id: string; amount: number }>(`SELECT order_id, amount FROM "${invoices}" ORDER BY order_id`);
        assert.equal(rows.length, 2, 'nats: one invoice per order id');
        assert.ok(
          rows.some((r) => r.order_id === first && Number(r.amount) === 1200),
          'nats: the first body made the invoice',
        );
        console.log(`nats: one invoice per order id for 3 + 8 copies (${outcomes.join(', ')})`);
      } finally {
        await consuming.stop();
        await consuming.done;
        await jsm.streams.delete(stream);
        await nc.close();
      }
    },
  },
};

const only = process.argv.slice(2);
const db = await PGlite.create();
for (const [name, example] of Object.entries(examples)) {
  if (only.length && !only.includes(name)) continue;
  if (example.needs && !process.env[example.needs]) {
    console.log(`${name}: skipped (${example.needs} unset)`);
    continue;
  }
  const started = performance.now();
  await example.run(db);
  console.log(`  (${name}: ${Math.round(performance.now() - started)} ms)`);
}
await db.close();
