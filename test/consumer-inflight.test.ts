/**
 * A duplicate delivery that arrives while the first copy runs does not sit out the lease
 * (protocol.md K18): with a store that wakes waiters (PostgreSQL, `notify: true`) it waits for
 * the result and is acked as a duplicate as soon as the first copy finished; with any other
 * store it goes back to RabbitMQ after a short delay and is acked on a later delivery. Either
 * way the consumer's other deliveries go on meanwhile. The lease is 20 s here; before, the
 * duplicate came back only once the lease could have ended (about 19 s later).
 *
 * Needs DATABASE_URL (two processes' worth of connections: LISTEN and the pool) and RabbitMQ
 * (AMQP_URL, default the local broker).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import amqplib from 'amqplib';
import { until } from './helpers/consumer-setup.js';
import { sleep } from './helpers/wait.js';
import { connect, headers } from '@nats-io/transport-node';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { type ConsumedMessage, type Disposition, IdempotentConsumer, type MessageHandler } from '../src/consumer/index.js';
import { consumeAmqp } from '../src/amqp/index.js';
import { consumeJetStream } from '../src/nats/index.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { Queryable } from '../src/postgres/client.js';
import { MemoryStore } from '../src/memory/index.js';
import { needs, serviceUrl } from './helpers/services.js';

const DATABASE_URL = process.env.DATABASE_URL;
const AMQP_URL = serviceUrl('AMQP_URL');
const LEASE_MS = 20_000;
/** How long the first copy keeps working after the duplicate and another message arrived. */
const FIRST_COPY_MORE_MS = 500;

/** One broker's side of the test: subscribe `consumer` with `handler`, publish a message by id. */
interface Broker {
  consume(
    queue: string,
    consumer: IdempotentConsumer<Queryable>,
    handler: MessageHandler<Queryable>,
    onDisposition: (d: Disposition, m: ConsumedMessage) => void,
  ): Promise<{ publish(id: string): Promise<void>; stop(): Promise<unknown> }>;
  close(): Promise<unknown>;
}

async function rabbitmq(): Promise<Broker> {
  const connection = await amqplib.connect(AMQP_URL!);
  const channel = await connection.createConfirmChannel();
  return {
    async consume(queue, consumer, handler, onDisposition) {
      await channel.assertQueue(queue, { durable: false });
      const running = await consumeAmqp<Queryable>({ channel, queue, consumer, prefetch: 8, onDisposition, handler });
      return {
        publish: (id) =>
          new Promise<void>((resolve, reject) =>
            channel.sendToQueue(queue, Buffer.from('{"order":1}'), { messageId: id, contentType: 'application/json' }, (err) =>
              err ? reject(err) : resolve(),
            ),
          ),
        async stop() {
          await running.stop();
          await channel.deleteQueue(queue).catch(() => undefined);
          await channel.deleteQueue(`${queue}.idem-retry`).catch(() => undefined);
        },
      };
    },
    close: () => connection.close(),
  };
}

/** JetStream: both copies published without `Nats-Msg-Id` (JetStream would drop the second); the id rides in `Idem-Id`. */
async function nats(): Promise<Broker> {
  const nc = await connect({ servers: serviceUrl('NATS_URL')! });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  return {
    async consume(queue, consumer, handler, onDisposition) {
      await jsm.streams.add({ name: queue, subjects: [queue] });
      await jsm.consumers.add(queue, { durable_name: queue, ack_policy: AckPolicy.Explicit, ack_wait: 2 * LEASE_MS * 1_000_000 });
      const messages = await (await js.consumers.get(queue, queue)).consume();
      const done = consumeJetStream<Queryable>({
        messages,
        consumer,
        handler,
        concurrency: 8,
        onDisposition,
        messageId: (m) => m.headers?.get('Idem-Id') ?? '',
      });
      return {
        async publish(id) {
          const h = headers();
          h.set('Idem-Id', id);
          h.set('Content-Type', 'application/json');
          await js.publish(queue, new TextEncoder().encode('{"order":1}'), { headers: h });
        },
        async stop() {
          await messages.close();
          await done;
          await jsm.streams.delete(queue).catch(() => undefined);
        },
      };
    },
    close: () => nc.close(),
  };
}

for (const [brokerName, open, service] of [
  ['RabbitMQ', rabbitmq, 'AMQP_URL'],
  ['NATS JetStream', nats, 'NATS_URL'],
] as const) {
  describe(`a duplicate delivery while the first copy runs (${brokerName}, idem on PostgreSQL)`, {
    skip: needs('DATABASE_URL', service),
  }, () => {
    let pool: pg.Pool;
    let broker: Broker;
    const cleanup: Array<() => Promise<unknown>> = [];
    before(async () => {
      pool = new pg.Pool({ connectionString: DATABASE_URL, max: 6 });
      broker = await open();
    });
    after(async () => {
      for (const step of cleanup.reverse()) await step().catch(() => undefined);
      await broker.close();
      await pool.end();
    });

    for (const notify of [true, false]) {
      const how = notify ? 'waits for the result (the store wakes waiters)' : 'comes back after a short delay (the store cannot wake waiters)';
      it(`${how}: acked as a duplicate right after the first copy finished; another message is processed meanwhile`, { timeout: 120_000 }, async () => {
        const table = `idem_inflight_${randomBytes(4).toString('hex')}`;
        const store = new PostgresStore({ client: pool, table, notify });
        await store.migrate();
        await pool.query(`CREATE TABLE ${table}_effects (message_id text NOT NULL)`);
        cleanup.push(async () => {
          await pool.query(`DROP TABLE IF EXISTS ${table}_effects`);
          await pool.query(`DROP TABLE IF EXISTS "${table}_blobs"`);
          await pool.query(`DROP TABLE IF EXISTS "${table}"`);
          await pool.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
        });
        const queue = `idem-inflight-${randomBytes(4).toString('hex')}`;
        const consumer = new IdempotentConsumer<Queryable>({ store, scope: queue, leaseMs: LEASE_MS });
        let openGate!: () => void;
        const gate = new Promise<void>((resolve) => (openGate = resolve));
        let onStarted!: () => void;
        const started = new Promise<void>((resolve) => (onStarted = resolve));
        const seen: Array<{ id: string; disposition: Disposition; at: number }> = [];
        const running = await broker.consume(
          queue,
          consumer,
          async (ctx) => {
            await ctx.phase('effect', (tx) => tx.query(`INSERT INTO ${table}_effects (message_id) VALUES ($1)`, [ctx.key]));
            if (ctx.key === 'first') {
              onStarted();
              await gate;
            }
          },
          (disposition, message) => seen.push({ id: message.id, disposition, at: performance.now() }),
        );
        cleanup.push(() => running.stop());

        await running.publish('first');
        await started;
        const duplicateSent = performance.now();
        await running.publish('first'); // the duplicate, while the first copy runs
        await running.publish('other');
        const acked = (id: string, reason: string) => seen.find((s) => s.id === id && s.disposition.action === 'ack' && s.disposition.reason === reason);
        await until(() => acked('other', 'processed') !== undefined, 30_000, 'the other message, acked while the duplicate waits');
        await sleep(FIRST_COPY_MORE_MS);
        const firstFinished = performance.now();
        openGate();
        await until(() => acked('first', 'duplicate') !== undefined, 60_000, 'the duplicate, acked');
        const duplicateAcked = acked('first', 'duplicate')!.at;
        const afterFinishMs = Math.round(duplicateAcked - firstFinished);
        const waitedMs = Math.round(duplicateAcked - duplicateSent);
        process.stdout.write(
          `# ${brokerName}, ${notify ? 'notify' : 'no notify'}: the duplicate was acked ${waitedMs} ms after it was sent, ${afterFinishMs} ms after the first copy finished\n`,
        );
        assert.ok(afterFinishMs < 3000, `the duplicate was acked ${afterFinishMs} ms after the first copy finished (lease ${LEASE_MS} ms)`);
        assert.ok(acked('first', 'processed'), 'the first copy was acked after its finish');
        const rows = (await pool.query(`SELECT message_id, count(*)::int AS n FROM ${table}_effects GROUP BY message_id ORDER BY 1`)).rows;
        assert.deepEqual(
          rows.map((r) => [r.message_id, r.n]),
          [
            ['first', 1],
            ['other', 1],
          ],
        );
      });
    }
  });
}

/** A MemoryStore that cannot wake waiters (no `subscribe`, no `notify` declared), like a store without wait mode. */
function unwakingStore(): MemoryStore {
  const store = new MemoryStore();
  Object.defineProperty(store, 'subscribe', { value: undefined });
  Object.defineProperty(store, 'capabilities', { value: { completion: true, operator: true } });
  return store;
}

describe('the in-progress disposition (any broker; what NATS naks with)', () => {
  it('sends a duplicate back after a short delay that grows by attempt, never past the lease, when the store cannot wake waiters', async () => {
    const consumer = new IdempotentConsumer({ store: unwakingStore(), scope: 'orders', leaseMs: 60_000 });
    let release!: () => void;
    const running = consumer.consume({ id: 'm-1', body: new TextEncoder().encode('{}') }, () => new Promise<void>((resolve) => (release = resolve)));
    await until(() => release !== undefined, 10_000, 'the first copy running');
    const body = new TextEncoder().encode('{}');
    const first = await consumer.consume({ id: 'm-1', body, attempt: 1 }, async () => assert.fail('a duplicate never runs'));
    const third = await consumer.consume({ id: 'm-1', body, attempt: 3 }, async () => assert.fail('a duplicate never runs'));
    assert.deepEqual(first, { action: 'retry', reason: 'in-progress', delayMs: 100 });
    assert.deepEqual(third, { action: 'retry', reason: 'in-progress', delayMs: 400 });
    release();
    assert.deepEqual(await running, { action: 'ack', reason: 'processed' });
    const short = new IdempotentConsumer({ store: unwakingStore(), scope: 'orders', leaseMs: 1000, inProgressDelayMs: 5000 });
    void short.consume({ id: 'm-2', body }, () => new Promise(() => {}));
    await sleep(50);
    const capped = await short.consume({ id: 'm-2', body, attempt: 1 }, async () => assert.fail('a duplicate never runs'));
    assert.equal(capped.action, 'retry');
    assert.ok((capped as { delayMs: number }).delayMs <= 1000, 'never past the lease');
  });

  it('with a store that wakes waiters (MemoryStore), a duplicate waits for the first copy and is acked as a duplicate (protocol.md K18)', async () => {
    const consumer = new IdempotentConsumer({ store: new MemoryStore(), scope: 'orders', leaseMs: 60_000 });
    let release!: () => void;
    const body = new TextEncoder().encode('{}');
    const running = consumer.consume({ id: 'm-1', body }, () => new Promise<void>((resolve) => (release = resolve)));
    await until(() => release !== undefined, 10_000, 'the first copy running');
    const duplicate = consumer.consume({ id: 'm-1', body, attempt: 1 }, async () => assert.fail('a duplicate never runs'));
    await sleep(50);
    release();
    assert.deepEqual(await running, { action: 'ack', reason: 'processed' });
    assert.deepEqual(await duplicate, { action: 'ack', reason: 'duplicate' });
  });
});
