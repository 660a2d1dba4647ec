/**
 * A consumer in its own process, for crash tests: consumes one queue (RabbitMQ) or one stream
 * (NATS JetStream) through idem on PostgreSQL, runs an `invoice` phase, prints
 * `PHASE <message id>` and then hangs, so the parent can SIGKILL it mid-message. Prints `READY`
 * once subscribed. Mode `effects` (protocol.md K39): a batch with `effects` that inserts, prints
 * `PHASE <message id>` and hangs inside the batch's transaction (RabbitMQ, prefetch 8).
 * Usage: tsx consumer-process.ts <amqp|nats> <queue-or-stream> <table> [handler|effects] (DATABASE_URL set).
 */
import pg from 'pg';
import { type ConsumedMessage, IdempotentConsumer, type MessageContext } from '../../src/consumer/index.js';
import { PostgresStore } from '../../src/postgres/index.js';
import type { Queryable } from '../../src/postgres/client.js';

const [broker, name, table, mode] = process.argv.slice(2) as [string, string, string, string | undefined];
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
const store = new PostgresStore({ client: pool, table });
const consumer = new IdempotentConsumer<Queryable>({ store, scope: name, leaseMs: 1500, heartbeatMs: 500, retryDelayMs: 100 });
const handler = async (ctx: MessageContext<Queryable>) => {
  await ctx.phase('invoice', (tx) => tx.query(`INSERT INTO ${table}_effects (message_id, note) VALUES ($1, 'invoice')`, [ctx.key]));
  process.stdout.write(`PHASE ${ctx.key}\n`);
  await new Promise(() => {}); // hang until killed
};

if (broker === 'amqp') {
  const amqplib = await import('amqplib');
  const { consumeAmqp } = await import('../../src/amqp/index.js');
  const connection = await amqplib.connect(process.env.AMQP_URL!); // the test's env (test/helpers/services.ts)
  const channel = await connection.createConfirmChannel();
  if (mode === 'effects') {
    const effects = async (tx: Queryable, message: ConsumedMessage) => {
      await tx.query(`INSERT INTO ${table}_effects (message_id, note) VALUES ($1, 'invoice')`, [message.id]);
      process.stdout.write(`PHASE ${message.id}\n`);
      await new Promise(() => {}); // hang inside the batch's transaction until killed
    };
    await consumeAmqp({ channel, queue: name, consumer, effects, prefetch: 8 });
  } else await consumeAmqp({ channel, queue: name, consumer, handler, prefetch: 1 });
} else {
  const { connect } = await import('@nats-io/transport-node');
  const { jetstream } = await import('@nats-io/jetstream');
  const { consumeJetStream } = await import('../../src/nats/index.js');
  const nc = await connect({ servers: process.env.NATS_URL! });
  const js = jetstream(nc);
  const messages = await (await js.consumers.get(name, name)).consume({ max_messages: 1 });
  void consumeJetStream({ messages, consumer, handler });
}
process.stdout.write('READY\n');
