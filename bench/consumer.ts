/**
 * Consumer throughput: messages per second through idem's consumer (`consumeAmqp` +
 * `IdempotentConsumer`, one phase per message, the key finished with it) vs the same consumer
 * with no dedup (the insert and an ack), on the same RabbitMQ queue and PostgreSQL, same run,
 * as a ratio. Each side runs `--rounds` times, alternating; the median is reported.
 *
 * Usage: DATABASE_URL=… tsx bench/consumer.ts [--messages 2000] [--prefetch 32] [--rounds 3]
 * (npm run bench:consumer). Not a test: nothing gates on speed.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import amqplib from 'amqplib';
import pg from 'pg';
import { amqpPublisher, consumeAmqp } from '../src/amqp/index.js';
import { IdempotentConsumer } from '../src/consumer/index.js';
import type { Queryable } from '../src/postgres/client.js';
import { PostgresStore } from '../src/postgres/index.js';

const { values } = parseArgs({
  options: { messages: { type: 'string', default: '2000' }, prefetch: { type: 'string', default: '32' }, rounds: { type: 'string', default: '3' } },
});
const MESSAGES = Number(values.messages);
const PREFETCH = Number(values.prefetch);
const ROUNDS = Number(values.rounds);
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test', max: 20 });
const connection = await amqplib.connect(process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672');
const channel = await connection.createConfirmChannel();
const run = randomBytes(4).toString('hex');
const table = `bench_consumer_${run}`;
const store = new PostgresStore({ client: pool, table });
await store.migrate();
await pool.query(`CREATE TABLE ${table}_effects (id bigserial PRIMARY KEY, message_id text NOT NULL)`);

async function fill(queue: string): Promise<void> {
  await channel.assertQueue(queue, { durable: false });
  const publish = amqpPublisher(channel);
  const body = new TextEncoder().encode('{"order":1}');
  const sends: Promise<void>[] = [];
  for (let i = 0; i < MESSAGES; i++) sends.push(publish({ id: randomUUID(), destination: queue, body, contentType: 'application/json' }));
  await Promise.all(sends);
}

/** Messages per second draining a pre-filled queue. */
async function measure(kind: Kind): Promise<number> {
  const queue = `bench-${kind}-${randomBytes(4).toString('hex')}`;
  await fill(queue);
  let settled = 0;
  let finish!: () => void;
  const done = new Promise<void>((resolve) => (finish = resolve));
  const count = () => {
    if (++settled === MESSAGES) finish();
  };
  const started = performance.now();
  let stop: () => Promise<void>;
  if (kind !== 'plain') {
    const insert = (tx: Queryable, id: string) => tx.query(`INSERT INTO ${table}_effects (message_id) VALUES ($1)`, [id]);
    const consumer = new IdempotentConsumer<Queryable>({ store, scope: queue });
    const running = await consumeAmqp({
      channel,
      queue,
      consumer,
      prefetch: PREFETCH,
      // 'idem': the effect in a phase, then the finish (two transactions); 'idem-complete': the
      // effect in the finish's own transaction (one), as a single-effect consumer would write it.
      handler: (ctx) => (kind === 'idem' ? ctx.phase('effect', (tx) => insert(tx, ctx.key)) : ctx.complete((tx) => insert(tx, ctx.key))),
      onDisposition: count,
    });
    stop = running.stop;
  } else {
    await channel.prefetch(PREFETCH);
    const { consumerTag } = await channel.consume(queue, (msg) => {
      if (!msg) return;
      void pool.query(`INSERT INTO ${table}_effects (message_id) VALUES ($1)`, [msg.properties.messageId]).then(() => {
        channel.ack(msg);
        count();
      });
    });
    stop = async () => void (await channel.cancel(consumerTag));
  }
  await done;
  const seconds = (performance.now() - started) / 1000;
  await stop();
  await channel.deleteQueue(queue);
  await channel.deleteQueue(`${queue}.idem-retry`).catch(() => undefined);
  return MESSAGES / seconds;
}

type Kind = 'plain' | 'idem' | 'idem-complete';
const results: Record<Kind, number[]> = { plain: [], idem: [], 'idem-complete': [] };
for (let r = 0; r < ROUNDS; r++) {
  for (const kind of ['plain', 'idem', 'idem-complete'] as const) {
    const rate = await measure(kind);
    results[kind].push(rate);
    console.log(`round ${r + 1} ${kind}: ${rate.toFixed(0)} msg/s`);
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const plain = median(results.plain);
const idem = median(results.idem);
const complete = median(results['idem-complete']);
console.log(`\n${MESSAGES} messages, prefetch ${PREFETCH}, median of ${ROUNDS}:`);
console.log('| consumer | msg/s | ratio to no dedup |\n|---|---|---|');
console.log(`| no dedup (insert + ack) | ${plain.toFixed(0)} | 1 |`);
console.log(`| idem, effect in a phase (claim, phase, finish, ack) | ${idem.toFixed(0)} | ${(idem / plain).toFixed(2)} |`);
console.log(`| idem, effect in complete (claim, finish with the effect, ack) | ${complete.toFixed(0)} | ${(complete / plain).toFixed(2)} |`);
await pool.query(`DROP TABLE IF EXISTS ${table}_effects`);
await pool.query(`DROP TABLE IF EXISTS ${table}_blobs`);
await pool.query(`DROP TABLE IF EXISTS ${table}`);
await pool.query(`DROP SEQUENCE IF EXISTS ${table}_lock_version_seq`);
await connection.close();
await pool.end();
