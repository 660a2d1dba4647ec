/**
 * The consumer chaos harness (issue 15) on real RabbitMQ or NATS JetStream and PostgreSQL: `messages` messages,
 * each published twice (the copies shuffled in), consumed by `workers` processes
 * (`consumer-worker.ts`) that are SIGKILLed and restarted, kill themselves after a commit and
 * before the ack (2 % of acks), and one of which is frozen (SIGSTOP) past its lease and the AMQP
 * heartbeat; an `OutboxRelay` publishes the events with confirms. Then it counts invoice rows,
 * PSP charges and outbox events per message. With `crashLoops`, that many more messages are
 * poison: their handler kills its process (exit or SIGKILL) on every delivery, and must be
 * dead-lettered after at most `maxAttempts` runs (protocol.md K23). The naive mode runs the same
 * input through consumers without idem (and no faults).
 * Used by test/consumer-chaos.test.ts (short) and bench/chaos/consumer.ts (`npm run chaos -- --consumer rabbitmq`).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import amqplib from 'amqplib';
import pg from 'pg';
import { amqpPublisher } from '../../src/amqp/index.js';
import { natsBroker } from './consumer-nats.js';
import { History, hashBytes, type Verdict } from './history.js';
import { Outbox, OutboxRelay, PostgresStore } from '../../src/postgres/index.js';

/** Options of {@link runConsumerChaos}. */
export interface ConsumerChaosOptions {
  databaseUrl: string;
  mode: 'idem' | 'naive';
  /** @default 'rabbitmq' */
  broker?: 'rabbitmq' | 'nats';
  /** Poison messages whose handler kills its process on every delivery (idem mode). @default 0 */
  crashLoops?: number;
  /** The consumers' `maxAttempts`. @default 5 with crash loops, else 1000 (kills alone never dead-letter) */
  maxAttempts?: number;
  messages: number;
  /** @default 3 */
  workers?: number;
  /** Kill a consumer every this many ms while work remains. @default 200 */
  killEveryMs?: number;
  /** Give up after this many ms. @default 180_000 */
  timeoutMs?: number;
}

/** What a run found, per message. */
export interface ConsumerChaosResult {
  messages: number;
  kills: number;
  freezes: number;
  seconds: number;
  /** Messages with more than one row / missing entirely. */
  invoices: { duplicated: number; missing: number };
  charges: { duplicated: number; missing: number };
  outbox: { duplicated: number; missing: number };
  /** False when the run hit its timeout before every message finished. */
  finished: boolean;
  /** Dead-lettered messages: poison ones (expected: all) and others (killed `maxAttempts` times). */
  deadLettered: { crashLoops: number; others: number };
  /** The most handler runs of one poison message (at most `maxAttempts`). */
  crashLoopRuns: number;
  /** The history checker's verdict (idem mode; bench/chaos/history.ts): one operation per message, publish to commit. */
  history?: Verdict;
}

const WORKER = fileURLToPath(new URL('./consumer-worker.ts', import.meta.url));

/** Runs one consumer chaos run and cleans up its tables and queues. */
export async function runConsumerChaos(options: ConsumerChaosOptions): Promise<ConsumerChaosResult> {
  const workersCount = options.workers ?? 3;
  const killEveryMs = options.killEveryMs ?? 200;
  const timeoutMs = options.timeoutMs ?? 180_000;
  const broker = options.broker ?? 'rabbitmq';
  const crashLoops = options.mode === 'idem' ? (options.crashLoops ?? 0) : 0;
  const maxAttempts = options.maxAttempts ?? (crashLoops > 0 ? 5 : 1000);
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: 8 });
  const connection = await amqplib.connect(process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672');
  const channel = await connection.createConfirmChannel();
  const nats = broker === 'nats' ? await natsBroker() : undefined;
  const dead = new Set<string>();
  const runs = new Map<string, number>();
  // The history (idem): when each message was first published, and first committed (a worker's DONE line).
  const publishedAt = new Map<string, number>();
  const doneAt = new Map<string, number>();
  const children = new Set<ChildProcess>();
  const relayAbort = new AbortController();
  const table = `idem_chaos_${randomBytes(5).toString('hex')}`;
  const queue = `idem-chaos-${randomBytes(5).toString('hex')}`;
  const events = `${queue}-events`;
  const started = performance.now();
  try {
    const store = new PostgresStore({ client: pool, table });
    await store.migrate();
    const outbox = new Outbox({ client: pool, table });
    await outbox.migrate();
    await pool.query(`CREATE TABLE ${table}_effects (id bigserial PRIMARY KEY, message_id text NOT NULL, note text)`);
    await pool.query(`CREATE TABLE ${table}_psp (idempotency_key text PRIMARY KEY, message_id text NOT NULL)`);
    await channel.assertQueue(queue, { durable: false });
    await channel.assertQueue(events, { durable: false });
    await channel.assertQueue(`${queue}.dead`, { durable: false });
    await nats?.setUp(queue, events);

    const start = async (): Promise<ChildProcess> => {
      const child = spawn(process.execPath, ['--import', 'tsx', WORKER, options.mode, queue, table, events, broker, String(maxAttempts)], {
        env: { ...process.env, DATABASE_URL: options.databaseUrl },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      children.add(child);
      child.once('exit', () => children.delete(child));
      await new Promise<void>((resolve, reject) => {
        child.once('exit', (code, signal) => reject(new Error(`chaos consumer exited early (${code ?? signal})`)));
        createInterface({ input: child.stdout! }).on('line', (line) => {
          if (line === 'READY') resolve();
          const [what, id] = line.split(' ');
          if (what === 'DEAD' && id) dead.add(id);
          if (what === 'RUN' && id) runs.set(id, (runs.get(id) ?? 0) + 1);
          if (what === 'DONE' && id && !doneAt.has(id)) doneAt.set(id, Date.now());
        });
      });
      return child;
    };
    const workers: ChildProcess[] = [];
    for (let i = 0; i < workersCount; i++) workers.push(await start());
    const relay =
      options.mode === 'idem'
        ? new OutboxRelay({ outbox, publish: nats ? nats.publisher : amqpPublisher(channel), batchSize: 50 }).run({ signal: relayAbort.signal, idleMs: 100 })
        : Promise.resolve();

    const ids = Array.from({ length: options.messages }, () => randomUUID());
    const poison = Array.from({ length: crashLoops }, () => `poison-${randomUUID()}`);
    const publish = nats ? nats.publishCopy : amqpPublisher(channel);
    const sends = [...ids, ...ids, ...poison].sort(() => Math.random() - 0.5);
    const send = (id: string) => {
      if (!publishedAt.has(id)) publishedAt.set(id, Date.now());
      return sendOne(id);
    };
    const sendOne = (id: string) => publish({ id, destination: queue, body: new TextEncoder().encode(id), contentType: 'text/plain' });
    // With idem, half the copies wait until the chaos has happened (two kills and the freeze):
    // on a busy machine the consumers could otherwise finish every message before it does, and
    // the run would prove nothing. Kills go on while the rest is consumed.
    const heldBack = options.mode === 'idem' ? sends.splice(Math.floor(sends.length / 2)) : [];
    for (const id of sends) await send(id);

    const count = async (sql: string) => Number((await pool.query(sql)).rows[0]!.n);
    const done =
      options.mode === 'idem'
        ? async () => (await count(`SELECT count(*)::int AS n FROM ${table} WHERE state = 'done'`)) + dead.size >= options.messages + crashLoops
        : async () => (await count(`SELECT count(*)::int AS n FROM ${table}_effects`)) >= 2 * options.messages;
    let kills = 0;
    let freezes = 0;
    let finished = true;
    while (!(await done())) {
      if (performance.now() - started > timeoutMs) {
        finished = false;
        break;
      }
      await new Promise((r) => setTimeout(r, killEveryMs));
      if (options.mode === 'naive') continue;
      // A poison message's handler killed its worker: restart it, as a supervisor would.
      for (let j = 0; j < workers.length; j++) if (workers[j]!.exitCode !== null || workers[j]!.signalCode !== null) workers[j] = await start();
      const i = Math.floor(Math.random() * workers.length);
      const victim = workers[i]!;
      const alive = victim.exitCode === null && victim.signalCode === null;
      if (freezes === 0 && kills === 1 && alive) {
        freezes++;
        victim.kill('SIGSTOP');
        setTimeout(() => victim.kill('SIGCONT'), 5000).unref();
        continue;
      }
      if (alive) {
        victim.kill('SIGKILL');
        kills++;
      }
      workers[i] = await start();
      if (heldBack.length > 0 && kills >= 2 && freezes === 1) for (const id of heldBack.splice(0)) await send(id);
    }
    if (options.mode === 'idem' && finished) {
      const drainBy = performance.now() + 60_000;
      while ((await outbox.pending()) > 0 && performance.now() < drainBy) await new Promise((r) => setTimeout(r, 100));
    }
    relayAbort.abort();
    await relay;
    const perMessage = async (sql: string) => {
      const rows = (await pool.query(sql)).rows as Array<{ id: string; n: number }>;
      const map = new Map(rows.map((r) => [r.id, Number(r.n)]));
      // A message dead-lettered (killed maxAttempts times) is not lost: it waits in the dead-letter queue.
      return { duplicated: [...map.values()].filter((n) => n > 1).length, missing: ids.filter((id) => !map.has(id) && !dead.has(id)).length, map };
    };
    const invoices = await perMessage(`SELECT message_id AS id, count(*)::int AS n FROM ${table}_effects GROUP BY 1`);
    const charges = await perMessage(`SELECT message_id AS id, count(*)::int AS n FROM ${table}_psp GROUP BY 1`);
    const outboxCounts =
      options.mode === 'idem'
        ? await perMessage(`SELECT substr(message_id, 17) AS id, count(*)::int AS n FROM ${table}_outbox GROUP BY 1`)
        : { duplicated: 0, missing: 0, map: new Map<string, number>() };
    let history: Verdict | undefined;
    if (options.mode === 'idem') {
      // One operation per message: ok once committed (done), a definite failure when dead-lettered, else unknown.
      const h = new History({ harness: `consumer-${broker}`, ledgers: ['invoice', 'psp', 'outbox'], livenessBoundMs: timeoutMs });
      const doneKeys = new Set((await pool.query(`SELECT key FROM ${table} WHERE state = 'done'`)).rows.map((r: { key: string }) => r.key));
      const end = Date.now();
      for (const id of [...ids, ...poison]) {
        const isDone = doneKeys.has(id);
        const completeMs = isDone ? (doneAt.get(id) ?? end) : dead.has(id) ? end : undefined;
        h.op({
          key: id,
          scope: queue,
          requestHash: hashBytes(id),
          invokeMs: publishedAt.get(id) ?? end,
          ...(completeMs !== undefined ? { completeMs } : {}),
          outcome: isDone ? { type: 'ok' } : dead.has(id) ? { type: 'fail', reason: 'dead-lettered' } : { type: 'unknown' },
          attempts: runs.get(id) ?? 1,
        });
        h.effect('invoice', id, invoices.map.get(id) ?? 0);
        h.effect('psp', id, charges.map.get(id) ?? 0);
        h.effect('outbox', id, outboxCounts.map.get(id) ?? 0);
      }
      history = h.finish((line) => console.log(`# ${line}`));
    }
    const strip = ({ duplicated, missing }: { duplicated: number; missing: number }) => ({ duplicated, missing });
    return {
      history,
      messages: options.messages,
      kills,
      freezes,
      seconds: (performance.now() - started) / 1000,
      finished,
      deadLettered: { crashLoops: poison.filter((id) => dead.has(id)).length, others: ids.filter((id) => dead.has(id)).length },
      crashLoopRuns: Math.max(0, ...poison.map((id) => runs.get(id) ?? 0)),
      invoices: strip(invoices),
      charges: strip(charges),
      outbox: strip(outboxCounts),
    };
  } finally {
    relayAbort.abort();
    for (const child of children) {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
    }
    for (const q of [queue, events, `${queue}.idem-retry`, `${queue}.dead`]) await channel.deleteQueue(q).catch(() => undefined);
    await nats?.tearDown();
    await connection.close().catch(() => undefined);
    for (const t of [`${table}_effects`, `${table}_psp`, `${table}_outbox`, `${table}_blobs`, table])
      await pool.query(`DROP TABLE IF EXISTS ${t}`).catch(() => undefined);
    await pool.query(`DROP SEQUENCE IF EXISTS ${table}_lock_version_seq`).catch(() => undefined);
    await pool.end();
  }
}
