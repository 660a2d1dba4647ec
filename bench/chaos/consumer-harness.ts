/**
 * The consumer chaos harness (issue 15) on real RabbitMQ and PostgreSQL: `messages` messages,
 * each published twice (the copies shuffled in), consumed by `workers` processes
 * (`consumer-worker.ts`) that are SIGKILLed and restarted, kill themselves after a commit and
 * before the ack (2 % of acks), and one of which is frozen (SIGSTOP) past its lease and the AMQP
 * heartbeat; an `OutboxRelay` publishes the events with confirms. Then it counts invoice rows,
 * PSP charges and outbox events per message. The naive mode runs the same input through
 * consumers without idem (and no faults).
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
import { Outbox, OutboxRelay, PostgresStore } from '../../src/postgres/index.js';

/** Options of {@link runConsumerChaos}. */
export interface ConsumerChaosOptions {
  databaseUrl: string;
  mode: 'idem' | 'naive';
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
}

const WORKER = fileURLToPath(new URL('./consumer-worker.ts', import.meta.url));

/** Runs one consumer chaos run and cleans up its tables and queues. */
export async function runConsumerChaos(options: ConsumerChaosOptions): Promise<ConsumerChaosResult> {
  const workersCount = options.workers ?? 3;
  const killEveryMs = options.killEveryMs ?? 200;
  const timeoutMs = options.timeoutMs ?? 180_000;
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: 8 });
  const connection = await amqplib.connect(process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672');
  const channel = await connection.createConfirmChannel();
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

    const start = async (): Promise<ChildProcess> => {
      const child = spawn(process.execPath, ['--import', 'tsx', WORKER, options.mode, queue, table, events], {
        env: { ...process.env, DATABASE_URL: options.databaseUrl },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      children.add(child);
      child.once('exit', () => children.delete(child));
      await new Promise<void>((resolve, reject) => {
        child.once('exit', (code, signal) => reject(new Error(`chaos consumer exited early (${code ?? signal})`)));
        createInterface({ input: child.stdout! }).on('line', (line) => line === 'READY' && resolve());
      });
      return child;
    };
    const workers: ChildProcess[] = [];
    for (let i = 0; i < workersCount; i++) workers.push(await start());
    const relay =
      options.mode === 'idem'
        ? new OutboxRelay({ outbox, publish: amqpPublisher(channel), batchSize: 50 }).run({ signal: relayAbort.signal, idleMs: 100 })
        : Promise.resolve();

    const ids = Array.from({ length: options.messages }, () => randomUUID());
    const publish = amqpPublisher(channel);
    const sends = [...ids, ...ids].sort(() => Math.random() - 0.5);
    for (const id of sends) await publish({ id, destination: queue, body: new TextEncoder().encode(id), contentType: 'text/plain' });

    const count = async (sql: string) => Number((await pool.query(sql)).rows[0]!.n);
    const done =
      options.mode === 'idem'
        ? async () => (await count(`SELECT count(*)::int AS n FROM ${table} WHERE state = 'done'`)) === options.messages
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
      return { duplicated: [...map.values()].filter((n) => n > 1).length, missing: ids.filter((id) => !map.has(id)).length };
    };
    return {
      messages: options.messages,
      kills,
      freezes,
      seconds: (performance.now() - started) / 1000,
      finished,
      invoices: await perMessage(`SELECT message_id AS id, count(*)::int AS n FROM ${table}_effects GROUP BY 1`),
      charges: await perMessage(`SELECT message_id AS id, count(*)::int AS n FROM ${table}_psp GROUP BY 1`),
      outbox:
        options.mode === 'idem'
          ? await perMessage(`SELECT substr(message_id, 17) AS id, count(*)::int AS n FROM ${table}_outbox GROUP BY 1`)
          : { duplicated: 0, missing: 0 },
    };
  } finally {
    relayAbort.abort();
    for (const child of children) {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
    }
    for (const q of [queue, events, `${queue}.idem-retry`]) await channel.deleteQueue(q).catch(() => undefined);
    await connection.close().catch(() => undefined);
    for (const t of [`${table}_effects`, `${table}_psp`, `${table}_outbox`, `${table}_blobs`, table])
      await pool.query(`DROP TABLE IF EXISTS ${t}`).catch(() => undefined);
    await pool.query(`DROP SEQUENCE IF EXISTS ${table}_lock_version_seq`).catch(() => undefined);
    await pool.end();
  }
}
