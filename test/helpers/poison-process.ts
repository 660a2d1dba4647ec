/**
 * A consumer process that one poison message kills (protocol.md K23 5), for
 * test/poison-neighbours.test.ts: RabbitMQ with prefetch 4 or NATS JetStream with concurrency 4,
 * idem on PostgreSQL (lease 4 s). The handler commits an `invoice` phase and prints `RUN <id>`;
 * the poison then waits (at most 1 s) until the other messages delivered to this process
 * have started too, so they are in flight with it, and SIGKILLs its own process. An ordinary
 * message waits (at most 2 s) until the poison has started in this process, then finishes
 * with an `event` effect. Prints `DISPOSITION <id> <action> <reason>` per delivery and `READY`
 * once subscribed.
 *
 * Usage (tsx): poison-process.ts <amqp|nats> <queue-or-stream> <table> <poison id> <dead-letter queue> <gate|no-gate>
 * (DATABASE_URL, AMQP_URL or NATS_URL set).
 */
import pg from 'pg';
import { type ConsumedMessage, type Disposition, IdempotentConsumer, type MessageContext } from '../../src/consumer/index.js';
import { PostgresStore } from '../../src/postgres/index.js';
import type { Queryable } from '../../src/postgres/client.js';

const [broker, name, table, poison, deadLetterQueue, gate] = process.argv.slice(2) as [string, string, string, string, string, string];
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 8 });
const store = new PostgresStore({ client: pool, table });
const consumer = new IdempotentConsumer<Queryable>({
  store,
  scope: name,
  leaseMs: 4000,
  heartbeatMs: 1000,
  retryDelayMs: 100,
  maxAttempts: 3,
  isolateCrashSuspects: gate === 'gate',
});

/** Resolves after `ms` or when `signal` fires, whichever is first: a bound on a readiness wait. */
const waitAtMost = (ms: number, signal: Promise<void>) => Promise.race([signal, new Promise<void>((r) => setTimeout(r, ms))]);
let poisonStarted!: () => void;
const poisonSeen = new Promise<void>((resolve) => (poisonStarted = resolve));
const delivered = new Set<string>();
const started = new Set<string>();
let othersStarted!: () => void;
const othersSeen = new Promise<void>((resolve) => (othersStarted = resolve));
const checkOthers = () => {
  if ([...delivered].every((id) => id === poison || started.has(id))) othersStarted();
};

const handler = async (ctx: MessageContext<Queryable>) => {
  const id = ctx.message.id;
  await ctx.phase('invoice', (tx) => tx.query(`INSERT INTO ${table}_effects (message_id, note) VALUES ($1, 'invoice')`, [id]));
  process.stdout.write(`RUN ${id}\n`);
  started.add(id);
  if (id === poison) {
    poisonStarted();
    checkOthers();
    await waitAtMost(1000, othersSeen);
    process.kill(process.pid, 'SIGKILL');
    await new Promise(() => {});
  }
  checkOthers();
  await waitAtMost(2000, poisonSeen);
  await ctx.complete((tx) => tx.query(`INSERT INTO ${table}_effects (message_id, note) VALUES ($1, 'event')`, [id]));
};
const onDisposition = (d: Disposition, m: ConsumedMessage) => process.stdout.write(`DISPOSITION ${m.id} ${d.action} ${d.reason}\n`);
const seen = (id: string) => delivered.add(id);

if (broker === 'amqp') {
  const amqplib = await import('amqplib');
  const { consumeAmqp } = await import('../../src/amqp/index.js');
  const connection = await amqplib.connect(process.env.AMQP_URL!);
  const channel = await connection.createConfirmChannel();
  await consumeAmqp({
    channel,
    queue: name,
    consumer,
    prefetch: 4,
    deadLetter: { exchange: '', routingKey: deadLetterQueue },
    messageId: (m) => {
      seen(m.properties.messageId ?? '');
      return m.properties.messageId;
    },
    handler,
    onDisposition,
  });
} else {
  const { connect } = await import('@nats-io/transport-node');
  const { jetstream } = await import('@nats-io/jetstream');
  const { consumeJetStream } = await import('../../src/nats/index.js');
  const nc = await connect({ servers: process.env.NATS_URL! });
  const messages = await (await jetstream(nc).consumers.get(name, name)).consume({ max_messages: 4 });
  void consumeJetStream({
    messages,
    consumer,
    concurrency: 4,
    ackWaitMs: 2000,
    messageId: (m) => {
      const id = m.headers?.get('Nats-Msg-Id') ?? '';
      seen(id);
      return id;
    },
    handler,
    onDisposition,
  });
}
process.stdout.write('READY\n');
