/**
 * One consumer process of the consumer chaos run (bench/chaos/consumer-harness.ts): consumes a
 * RabbitMQ queue or a NATS JetStream consumer with idem (or, with `naive`, RabbitMQ without it) on PostgreSQL. Per message: an invoice
 * row, a PSP charge (keyed by the derived key; a fresh key for naive), and an `invoice-created`
 * event (through the outbox; naive publishes it directly). With `idem`, a small share of
 * deliveries kills its own process right after the commit, before the ack (a dropped ack), and a
 * `poison-…` message's handler kills its process after its invoice phase on every delivery
 * (`process.exit` or SIGKILL), printing `RUN <id>` first (protocol.md K23). Prints `DEAD <id>
 * <reason>` for every dead-letter disposition and READY once subscribed.
 * Usage: tsx bench/chaos/consumer-worker.ts <idem|naive> <queue> <table> <events-queue>
 * [rabbitmq|nats] [maxAttempts] (DATABASE_URL set).
 */
import { randomUUID } from 'node:crypto';
import amqplib from 'amqplib';
import pg from 'pg';
import { type ConsumedMessage, type Disposition, IdempotentConsumer, type MessageContext } from '../../src/consumer/index.js';
import { amqpPublisher, consumeAmqp } from '../../src/amqp/index.js';
import { Outbox, PostgresStore } from '../../src/postgres/index.js';
import type { Queryable } from '../../src/postgres/client.js';

const [mode, queue, table, eventsQueue, broker = 'rabbitmq', maxAttempts = '1000'] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
  string?,
  string?,
];
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 6 });
pool.on('error', () => undefined);
// heartbeat=1: a frozen process loses its connection within seconds, and its messages are redelivered.
const amqpUrl = new URL(process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672');
amqpUrl.searchParams.set('heartbeat', '1');
const connection = await amqplib.connect(amqpUrl.toString());
connection.on('error', () => undefined);
const channel = await connection.createConfirmChannel();
channel.on('error', () => undefined);
/** The fake PSP: 50 ms per call (so kills land mid-message), one charge per idempotency key. */
const charge = async (key: string, messageId: string) => {
  await new Promise((r) => setTimeout(r, 50));
  await pool.query(`INSERT INTO ${table}_psp (idempotency_key, message_id) VALUES ($1, $2) ON CONFLICT (idempotency_key) DO NOTHING`, [key, messageId]);
};

if (mode === 'idem') {
  const store = new PostgresStore({ client: pool, table });
  const outbox = new Outbox({ client: pool, table });
  const consumer = new IdempotentConsumer<Queryable>({
    store,
    scope: queue,
    leaseMs: 2000,
    heartbeatMs: 600,
    retryDelayMs: (n) => Math.min(1000, 100 * n),
    maxAttempts: Number(maxAttempts),
  });
  const handler = async (ctx: MessageContext<Queryable>) => {
    await ctx.phase('invoice', (tx) => tx.query(`INSERT INTO ${table}_effects (message_id, note) VALUES ($1, 'invoice')`, [ctx.key]));
    if (ctx.key.startsWith('poison-')) {
      // A crash loop (protocol.md K23): this handler kills its process on every delivery.
      process.stdout.write(`RUN ${ctx.key}\n`);
      if (Math.random() < 0.5) process.exit(1);
      process.kill(process.pid, 'SIGKILL');
    }
    await ctx.call('charge', (key) => charge(key, ctx.key));
    await ctx.complete((tx) => outbox.enqueue(tx, { id: `invoice-created:${ctx.key}`, destination: eventsQueue, body: ctx.key }));
  };
  const onDisposition = (d: Disposition, message: ConsumedMessage) => {
    if (d.action === 'dead-letter') process.stdout.write(`DEAD ${message.id} ${d.reason}\n`);
    if (d.action === 'ack') process.stdout.write(`DONE ${message.id}\n`); // committed (the history's completion time)
    if (d.action === 'ack' && Math.random() < 0.02) process.kill(process.pid, 'SIGKILL'); // committed, ack dropped
  };
  if (broker === 'nats') {
    const { connect } = await import('@nats-io/transport-node');
    const { jetstream } = await import('@nats-io/jetstream');
    const { consumeJetStream } = await import('../../src/nats/index.js');
    const { ID_HEADER, NATS_ACK_WAIT_MS } = await import('./consumer-nats.js');
    const nc = await connect({ servers: process.env.NATS_URL ?? '127.0.0.1:4222' });
    const messages = await (await jetstream(nc).consumers.get(queue, queue)).consume({ max_messages: 2 });
    void consumeJetStream({
      messages,
      consumer,
      handler,
      concurrency: 2,
      ackWaitMs: NATS_ACK_WAIT_MS,
      messageId: (m) => m.headers?.get(ID_HEADER) ?? '',
      onDisposition,
    });
  } else {
    await consumeAmqp({ channel, queue, consumer, prefetch: 2, deadLetter: { exchange: '', routingKey: `${queue}.dead` }, handler, onDisposition });
  }
} else {
  const publish = amqpPublisher(channel);
  await channel.prefetch(2);
  await channel.consume(queue, (msg) => {
    if (!msg) return;
    const id = String(msg.properties.messageId);
    void (async () => {
      await pool.query(`INSERT INTO ${table}_effects (message_id, note) VALUES ($1, 'invoice')`, [id]);
      await charge(randomUUID(), id);
      await publish({ id: `invoice-created:${id}`, destination: eventsQueue, body: new TextEncoder().encode(id), contentType: null });
      channel.ack(msg);
    })().catch(() => undefined);
  });
}
process.stdout.write('READY\n');
