/**
 * The orders consumer: an `order-placed` message is consumed through idem; the handler inserts
 * an invoice (a phase), charges the fake PSP with the derived key (a call), and publishes an
 * `invoice-created` event through the transactional outbox (in the finish's transaction). Every
 * order is published twice, as a retrying publisher would; the run ends with one invoice, one
 * charge and one event per order.
 *
 * Usage: npm run example:consumer -- --broker rabbitmq|nats [--orders 5]
 * RabbitMQ at AMQP_URL (default amqp://guest:guest@127.0.0.1:5672), NATS at NATS_URL (default
 * 127.0.0.1:4222); the database is PostgreSQL at DATABASE_URL, or an in-memory PGlite.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { IdempotentConsumer, type MessageContext, type Publisher } from 'idem/consumer';
import { amqpPublisher, consumeAmqp } from 'idem/amqp';
import { consumeJetStream, jetStreamPublisher } from 'idem/nats';
import { Outbox, OutboxRelay, PostgresStore, type Queryable, type SqlClient } from 'idem/postgres';
import { FakePsp } from '../payments/psp.js';
import { migrateExample } from '../payments/schema.js';

const { values } = parseArgs({ options: { broker: { type: 'string', default: 'rabbitmq' }, orders: { type: 'string', default: '5' } } });
const broker = values.broker;
if (broker !== 'rabbitmq' && broker !== 'nats') throw new Error('--broker must be rabbitmq or nats');
const orderCount = Number(values.orders);

// Database: PostgreSQL when DATABASE_URL is set, else an in-memory PGlite.
let client: SqlClient & Queryable;
let closeDb: () => Promise<void>;
if (process.env.DATABASE_URL) {
  const { default: pg } = await import('pg');
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
  client = pool;
  closeDb = () => pool.end();
} else {
  const { PGlite } = await import('@electric-sql/pglite');
  const db = await PGlite.create();
  client = db;
  closeDb = () => db.close();
}
const run = randomBytes(4).toString('hex');
const table = `orders_keys_${run}`;
const store = new PostgresStore({ client, table });
await store.migrate();
const outbox = new Outbox({ client, table });
await outbox.migrate();
await migrateExample(client);
await client.query('CREATE TABLE IF NOT EXISTS invoices (id bigserial PRIMARY KEY, order_id text NOT NULL, amount bigint NOT NULL)');
const psp = new FakePsp(client, { latencyMs: 10 });

interface OrderPlaced {
  orderId: string;
  amount: number;
  customer: string;
}
const ordersQueue = `order-placed-${run}`;
const eventsQueue = `invoice-created-${run}`;
const consumer = new IdempotentConsumer<Queryable>({ store, scope: ordersQueue });

/** The work for one order: invoice, charge, event. */
async function handle(ctx: MessageContext<Queryable>): Promise<void> {
  const order = JSON.parse(new TextDecoder().decode(ctx.message.body)) as OrderPlaced;
  const invoiceId = await ctx.phase('invoice', async (tx) => {
    const { rows } = await tx.query('INSERT INTO invoices (order_id, amount) VALUES ($1, $2) RETURNING id', [order.orderId, order.amount]);
    return String(rows[0]!.id);
  });
  const charge = await ctx.call('charge', (derivedKey) =>
    psp.charge({ idempotencyKey: derivedKey, amount: order.amount, currency: 'eur', customer: order.customer }),
  );
  await ctx.complete((tx) =>
    outbox.enqueueJson(tx, {
      id: `invoice-created:${order.orderId}`,
      destination: eventsQueue,
      body: { orderId: order.orderId, invoiceId, chargeId: charge.id },
    }),
  );
}

const orders: OrderPlaced[] = Array.from({ length: orderCount }, (_, i) => ({ orderId: randomUUID(), amount: 1000 + i, customer: `cus_${run}_${i}` }));
const encode = (o: OrderPlaced) => new TextEncoder().encode(JSON.stringify(o));
let settled = 0;
let events = 0;
const stopped: Array<() => Promise<void>> = [];
let publish: Publisher;

if (broker === 'rabbitmq') {
  const { default: amqplib } = await import('amqplib');
  const connection = await amqplib.connect(process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672');
  const channel = await connection.createConfirmChannel();
  await channel.assertQueue(ordersQueue);
  await channel.assertQueue(eventsQueue);
  publish = amqpPublisher(channel);
  const running = await consumeAmqp({ channel, queue: ordersQueue, consumer, handler: handle, onDisposition: log });
  await channel.consume(eventsQueue, (m) => {
    if (m) {
      events++;
      channel.ack(m);
    }
  });
  stopped.push(async () => {
    await running.stop();
    for (const q of [ordersQueue, eventsQueue, `${ordersQueue}.idem-retry`]) await channel.deleteQueue(q);
    await connection.close();
  });
} else {
  const { connect } = await import('@nats-io/transport-node');
  const { AckPolicy, jetstream, jetstreamManager } = await import('@nats-io/jetstream');
  const nc = await connect({ servers: process.env.NATS_URL ?? '127.0.0.1:4222' });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  for (const name of [ordersQueue, eventsQueue]) {
    await jsm.streams.add({ name, subjects: [name] });
    await jsm.consumers.add(name, { durable_name: name, ack_policy: AckPolicy.Explicit, ack_wait: 30_000_000_000 });
  }
  publish = jetStreamPublisher(js);
  const messages = await (await js.consumers.get(ordersQueue, ordersQueue)).consume();
  const done = consumeJetStream({ messages, consumer, handler: handle, ackWaitMs: 30_000, onDisposition: log });
  const eventMessages = await (await js.consumers.get(eventsQueue, eventsQueue)).consume();
  void (async () => {
    for await (const m of eventMessages) {
      events++;
      m.ack();
    }
  })();
  stopped.push(async () => {
    await messages.close();
    await eventMessages.close();
    await done;
    for (const name of [ordersQueue, eventsQueue]) await jsm.streams.delete(name);
    await nc.close();
  });
}

function log(d: { action: string; reason: string }, m: { id: string; attempt?: number }): void {
  settled++;
  console.log(`order ${m.id.slice(0, 8)} (delivery ${m.attempt ?? 1}): ${d.action} (${d.reason})`);
}

// Every order twice, with its order id as the message id: the second copy is a duplicate
// (JetStream already drops it by Nats-Msg-Id inside its duplicate window; RabbitMQ delivers it
// and idem acks it as a duplicate).
for (const o of orders) await publish({ id: o.orderId, destination: ordersQueue, body: encode(o), contentType: 'application/json' });
for (const o of orders) await publish({ id: o.orderId, destination: ordersQueue, body: encode(o), contentType: 'application/json' });

const relayAbort = new AbortController();
const relay = new OutboxRelay({ outbox, publish }).run({ signal: relayAbort.signal, idleMs: 50 });
const deadline = performance.now() + 60_000;
while ((settled < orders.length * (broker === 'nats' ? 1 : 2) || events < orders.length) && performance.now() < deadline) {
  await new Promise((r) => setTimeout(r, 50));
}
relayAbort.abort();
await relay;
for (const stop of stopped) await stop();

const ids = orders.map((o) => o.orderId);
const count = async (sql: string, param: unknown) => Number((await client.query(sql, [param])).rows[0]!.n);
const invoices = await count('SELECT count(*)::int AS n FROM invoices WHERE order_id = ANY($1)', ids);
const charges = await count('SELECT count(*)::int AS n FROM psp_charges WHERE customer LIKE $1', `cus_${run}_%`);
console.log(`\n${orders.length} orders, each published twice on ${broker}:`);
console.log(`  invoices: ${invoices}, PSP charges: ${charges}, invoice-created events received: ${events}`);
await client.query(`DROP TABLE IF EXISTS ${table}_outbox`);
await client.query(`DROP TABLE IF EXISTS ${table}_blobs`);
await client.query(`DROP TABLE IF EXISTS ${table}`);
await client.query(`DROP SEQUENCE IF EXISTS ${table}_lock_version_seq`);
await closeDb();
if (invoices !== orders.length || charges !== orders.length || events !== orders.length) {
  console.error('expected exactly one invoice, one charge and one event per order');
  process.exit(1);
}
