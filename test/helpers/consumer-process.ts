/**
 * A consumer in its own process, for crash tests: consumes one queue (RabbitMQ) or one stream
 * (NATS JetStream) through idem on PostgreSQL, runs an `invoice` phase, prints
 * `PHASE <message id>` and then hangs, so the parent can SIGKILL it mid-message. Prints `READY`
 * once subscribed.
 * Usage: tsx consumer-process.ts <amqp|nats> <queue-or-stream> <table> (DATABASE_URL set).
 */
import pg from 'pg';
import { IdempotentConsumer, type MessageContext } from '../../src/consumer/index.js';
import { PostgresStore } from '../../src/postgres/index.js';
import type { Queryable } from '../../src/postgres/client.js';

const [broker, name, table] = process.argv.slice(2) as [string, string, string];
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
  await consumeAmqp({ channel, queue: name, consumer, handler, prefetch: 1 });
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
