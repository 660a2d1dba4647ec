/**
 * Consumers (issue 27): messages per second through idem's consumer vs the same consumer with no
 * dedup, on RabbitMQ (`consumeAmqp`) and on NATS JetStream (`consumeJetStream`), same run, as a
 * ratio. Each round pre-fills a fresh queue (stream) with `messages` messages and times how long
 * a side takes to drain it; the sides alternate (A B C, C B A, …) and the median is reported.
 *
 * Every side runs the same handler, one PostgreSQL INSERT per message into the same table, with
 * the same broker, the same prefetch (`prefetch` unacked deliveries, handled concurrently) and one
 * pool of `prefetch` connections:
 * - *no dedup*: a plain consumer, the INSERT (autocommit) then the ack once it committed;
 * - *idem, phase*: the guide's shape, `ctx.phase('effect', insert)` and return (claim, the phase's
 *   transaction, the finish, the ack);
 * - *idem, complete*: `ctx.complete(insert)`, the INSERT in the finish's own transaction;
 * - *idem, effects*: `effects: insert` (protocol.md K39), the deliveries that arrived together
 *   read, applied and inserted finished in one transaction (the target row).
 * The idem sides use `PostgresStore({ groupCommit: true })` (protocol.md K19): concurrent
 * deliveries' claims and effect-less finishes share one statement and one commit.
 *
 * A broker that does not answer is skipped with a note. In the suite: `npm run bench -- --only=consumer`.
 * Alone: `tsx bench/consumer.ts [--quick] [--rounds=N]` (`npm run bench:consumer`) prints the section.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { AckPolicy, type ConsumerMessages, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect as natsConnect, type NatsConnection, nanos } from '@nats-io/transport-node';
import amqplib from 'amqplib';
import pg from 'pg';
import { amqpPublisher, consumeAmqp } from '../src/amqp/index.js';
import { IdempotentConsumer, type MessageEffects, type MessageHandler } from '../src/consumer/index.js';
import { consumeJetStream } from '../src/nats/index.js';
import type { Queryable } from '../src/postgres/client.js';
import { PostgresStore } from '../src/postgres/index.js';
import { type BenchConfig, config, uniqueTable } from './lib/config.js';
import { dropTable, type Section } from './lib/fixtures.js';
import { fmtNoise, fmtRate, interleave, ratio, type Sampled, type Stats } from './lib/measure.js';

const PREFETCH = 32;
const BODY = new TextEncoder().encode('{"order":1}');
const ALL_SIDES = ['raw', 'phase', 'complete', 'effects'] as const;
type Side = (typeof ALL_SIDES)[number];
/** BENCH_CONSUMER_SIDES=phase (a comma list) runs only those sides: for a CPU profile of one side. */
const SIDES = ALL_SIDES.filter((s) => !process.env.BENCH_CONSUMER_SIDES || process.env.BENCH_CONSUMER_SIDES.split(',').includes(s));
const BROKERS = process.env.BENCH_CONSUMER_BROKERS?.split(',');
const SIDE_NAMES: Record<Side, string> = {
  raw: 'no dedup (INSERT, then ack)',
  phase: 'idem, `ctx.phase` (claim, phase, finish, ack)',
  complete: 'idem, `ctx.complete` (claim, finish with the INSERT, ack)',
  effects: 'idem, `effects` (a batch of deliveries read, applied, inserted finished in one transaction, then acked)',
};

/** One broker: fills a fresh queue with `n` messages, then drains it with a side and says how long that took. */
interface Broker {
  name: string;
  drain(side: Side, n: number): Promise<Stats>;
  close(): Promise<void>;
}

interface Bench {
  pool: pg.Pool;
  table: string;
  insert: (db: Queryable, id: string) => Promise<unknown>;
  consumer(scope: string): IdempotentConsumer<Queryable>;
}

/** The idem side's work: a `handler`, or `effects` (batched, protocol.md K39). */
const work = (bench: Bench, side: Side): { handler: MessageHandler<Queryable> } | { effects: MessageEffects<Queryable> } =>
  side === 'effects'
    ? { effects: (tx, message) => bench.insert(tx, message.id) }
    : {
        handler: (ctx) => (side === 'phase' ? ctx.phase('effect', (tx) => bench.insert(tx, ctx.key)) : ctx.complete((tx) => bench.insert(tx, ctx.key))),
      };

/** Resolves when `n` messages were counted. */
function counter(n: number): { count: () => void; done: Promise<void> } {
  let settled = 0;
  let finish!: () => void;
  const done = new Promise<void>((resolve) => (finish = resolve));
  return { count: () => void (++settled === n && finish()), done };
}

/**
 * Statements sent to PostgreSQL (every `pg` client query: BEGIN and COMMIT included), counted
 * while a side drains: the profile that does not move with the machine's load.
 */
let statements = 0;
const query = pg.Client.prototype.query;
pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
  statements++;
  return (query as (...a: unknown[]) => unknown).apply(this, args);
} as typeof query;
/** Statements per message of each broker's side, per round. */
const perMessage = new Map<string, number[]>();

const stats = (n: number, started: number, key: string, statementsBefore: number): Stats => {
  const seconds = (performance.now() - started) / 1000;
  perMessage.set(key, [...(perMessage.get(key) ?? []), (statements - statementsBefore) / n]);
  return { opsPerSec: n / seconds, p50Ms: Number.NaN, p99Ms: Number.NaN, ops: n };
};

async function rabbit(bench: Bench): Promise<Broker> {
  const connection = await amqplib.connect(process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672', { timeout: 2000 });
  const channel = await connection.createConfirmChannel();
  const publish = amqpPublisher(channel);
  return {
    name: 'RabbitMQ',
    async drain(side, n) {
      const queue = `bench-consumer-${randomBytes(4).toString('hex')}`;
      await channel.assertQueue(queue, { durable: false });
      const sends: Promise<void>[] = [];
      for (let i = 0; i < n; i++) sends.push(publish({ id: randomUUID(), destination: queue, body: BODY, contentType: 'application/json' }));
      await Promise.all(sends);
      const { count, done } = counter(n);
      const started = performance.now();
      const before = statements;
      let stop: () => Promise<void>;
      if (side === 'raw') {
        await channel.prefetch(PREFETCH);
        const { consumerTag } = await channel.consume(queue, (msg) => {
          if (!msg) return;
          void bench.insert(bench.pool, msg.properties.messageId).then(() => {
            channel.ack(msg);
            count();
          });
        });
        stop = async () => void (await channel.cancel(consumerTag));
      } else {
        const running = await consumeAmqp({
          channel,
          queue,
          consumer: bench.consumer(queue),
          prefetch: PREFETCH,
          ...work(bench, side),
          onDisposition: (d) => {
            if (d.action !== 'ack') throw new Error(`bench: a delivery was not acked (${d.reason})`);
            count();
          },
        });
        stop = running.stop;
      }
      await done;
      const result = stats(n, started, `RabbitMQ:${side}`, before);
      await stop();
      await channel.deleteQueue(queue);
      await channel.deleteQueue(`${queue}.idem-retry`).catch(() => undefined);
      return result;
    },
    async close() {
      await connection.close();
    },
  };
}

async function nats(bench: Bench): Promise<Broker> {
  const nc: NatsConnection = await natsConnect({ servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222', timeout: 2000 });
  const js = jetstream(nc);
  const jsm = await jetstreamManager(nc);
  return {
    name: 'NATS JetStream',
    async drain(side, n) {
      const name = `bench_consumer_${randomBytes(4).toString('hex')}`;
      await jsm.streams.add({ name, subjects: [name] });
      try {
        for (let i = 0; i < n; i += 500) {
          const sends: Promise<unknown>[] = [];
          for (let j = i; j < Math.min(n, i + 500); j++) sends.push(js.publish(name, BODY, { msgID: randomUUID() }));
          await Promise.all(sends);
        }
        await jsm.consumers.add(name, { durable_name: name, ack_policy: AckPolicy.Explicit, ack_wait: nanos(60_000), max_ack_pending: PREFETCH });
        const messages: ConsumerMessages = await (await js.consumers.get(name, name)).consume({ max_messages: PREFETCH });
        const { count, done } = counter(n);
        const started = performance.now();
        const before = statements;
        let running: Promise<void>;
        if (side === 'raw') {
          running = (async () => {
            const inFlight = new Set<Promise<void>>();
            for await (const msg of messages) {
              const p = bench.insert(bench.pool, msg.headers?.get('Nats-Msg-Id') ?? '').then(() => {
                msg.ack();
                count();
              });
              inFlight.add(p);
              void p.finally(() => inFlight.delete(p));
              if (inFlight.size >= PREFETCH) await Promise.race(inFlight);
            }
            await Promise.all([...inFlight]);
          })();
        } else {
          running = consumeJetStream({
            messages,
            consumer: bench.consumer(name),
            ...work(bench, side),
            concurrency: PREFETCH,
            ackWaitMs: 60_000,
            onDisposition: (d) => {
              if (d.action !== 'ack') throw new Error(`bench: a delivery was not acked (${d.reason})`);
              count();
            },
          });
        }
        await done;
        const result = stats(n, started, `NATS JetStream:${side}`, before);
        await messages.close();
        await running;
        return result;
      } finally {
        await jsm.streams.delete(name).catch(() => undefined);
      }
    },
    async close() {
      await nc.close();
    },
  };
}

export async function consumers(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const messages = cfg.quick ? 600 : 2000;
  const pool = new pg.Pool({ connectionString: cfg.databaseUrl, max: PREFETCH });
  const table = uniqueTable('consumer');
  const effects = `${table}_effects`;
  const store = new PostgresStore<Queryable>({ client: pool, table, groupCommit: true });
  await store.migrate();
  await pool.query(`CREATE TABLE ${effects} (id bigserial PRIMARY KEY, message_id text NOT NULL)`);
  const bench: Bench = {
    pool,
    table,
    insert: (db, id) => db.query(`INSERT INTO ${effects} (message_id) VALUES ($1)`, [id]),
    consumer: (scope) => new IdempotentConsumer<Queryable>({ store, scope }),
  };
  const results: Array<{ broker: string; sides?: Record<Side, Sampled>; skipped?: string }> = [];
  try {
    for (const [label, open] of [
      ['RabbitMQ', rabbit],
      ['NATS JetStream', nats],
    ] as const) {
      if (BROKERS && !BROKERS.includes(open.name)) continue;
      let broker: Broker;
      try {
        broker = await open(bench);
      } catch (error) {
        log(`  consumer: ${label} unreachable, skipped (${(error as Error).message})`);
        results.push({ broker: label, skipped: `${label} did not answer (${String((error as Error).message).split('\n')[0]}); not measured.` });
        continue;
      }
      try {
        log(`  consumer: ${label}, ${messages} messages per round, prefetch ${PREFETCH}`);
        await broker.drain('complete', Math.min(200, messages)); // warm-up: connections, JIT
        const cases = Object.fromEntries(SIDES.map((side) => [side, () => broker.drain(side, messages)])) as Record<Side, () => Promise<Stats>>;
        const sides = await interleave(cases, Math.max(3, cfg.rounds));
        for (const side of SIDES) log(`    ${side}: ${sides[side].rounds.map((r) => r.toFixed(0)).join(', ')} msg/s`);
        results.push({ broker: label, sides });
      } finally {
        await broker.close();
      }
    }
  } finally {
    await pool.query(`DROP TABLE IF EXISTS ${effects}`);
    await dropTable(pool, table);
    await pool.end();
  }
  const lines = [
    `Each round drains a pre-filled queue (a fresh JetStream stream) of ${messages} messages; the sides alternate, ${Math.max(3, cfg.rounds)} rounds, median. ` +
      `Same broker, same prefetch (${PREFETCH} unacked deliveries, handled concurrently), same handler: one PostgreSQL INSERT per message, one pool of ${PREFETCH} connections. ` +
      '*No dedup*: the INSERT (autocommit), then the ack. *idem*: `consumeAmqp` / `consumeJetStream` with an `IdempotentConsumer` on `PostgresStore({ groupCommit: true })`; ' +
      'with a `handler`, each message is claimed, its INSERT committed with its recovery point (`ctx.phase`) or with the finish (`ctx.complete`), and acked after the finish committed; ' +
      'with `effects` (protocol.md K39), the deliveries that arrived together are read, applied and their keys inserted finished in one transaction, then acked. The target row is `effects`.',
    '',
    '| broker | consumer | msg/s | **/ no dedup** | PostgreSQL statements per message | noise |',
    '|---|---|---:|---:|---:|---:|',
  ];
  const statementsOf = (broker: string, side: Side) => {
    const xs = [...(perMessage.get(`${broker}:${side}`) ?? [])].sort((a, b) => a - b);
    return xs.length ? xs[Math.floor(xs.length / 2)]!.toFixed(2) : 'n/a';
  };
  const targets: Section['targets'] = {};
  const headline: Record<string, string> = {};
  for (const r of results) {
    if (!r.sides) {
      lines.push(`| ${r.broker} | skipped | | | | ${r.skipped} |`);
      continue;
    }
    const { raw, phase, complete, effects } = r.sides;
    if (!raw || !phase || !complete || !effects) continue; // a profile of some sides only
    for (const side of SIDES) {
      const s = r.sides[side];
      lines.push(
        `| ${r.broker} | ${SIDE_NAMES[side]} | ${fmtRate(s.opsPerSec)} | **${side === 'raw' ? '1' : ratio(s.opsPerSec, raw.opsPerSec)}** | ${statementsOf(r.broker, side)} | ${fmtNoise(s.noise)} |`,
      );
    }
    targets[r.broker === 'RabbitMQ' ? 'consumer-amqp' : 'consumer-nats'] = {
      value: effects.opsPerSec / raw.opsPerSec,
      detail: `${fmtRate(effects.opsPerSec)} / ${fmtRate(raw.opsPerSec)} msg/s (\`effects\`, batched, ${statementsOf(r.broker, 'effects')} statements per message); \`ctx.phase\` ${ratio(phase.opsPerSec, raw.opsPerSec)}, \`ctx.complete\` ${ratio(complete.opsPerSec, raw.opsPerSec)}`,
      whyMissed:
        "per message idem costs node 1.5-1.9x and PostgreSQL 1.1-1.6x the plain consumer's CPU (the fingerprint, the key's row besides the effect's, a share of the batch's BEGIN, read, insert and COMMIT: about 1.4 statements per message); on this CPU-bound shared machine the rate follows that, and a batch's INSERTs run one after another on its connection (two batches at a time, both busy nearly all the time) where the plain consumer runs 32 at once (bench/notes.md).",
    };
    headline[`consumer ${r.broker}: idem / no dedup (effects, phase)`] = `${ratio(effects.opsPerSec, raw.opsPerSec)}, ${ratio(phase.opsPerSec, raw.opsPerSec)}`;
  }
  return { title: 'Consumers: idem vs the same consumer with no dedup (same run)', markdown: lines.join('\n'), targets, headline };
}

if (process.argv[1]?.endsWith('consumer.ts')) {
  const started = performance.now();
  const section = await consumers(config(process.argv.slice(2)), (line) => console.log(`[${((performance.now() - started) / 1000).toFixed(1)} s] ${line}`));
  console.log(`\n## ${section.title}\n\n${section.markdown}`);
  process.exit(0);
}
