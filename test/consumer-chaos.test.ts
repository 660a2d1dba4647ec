/**
 * The short consumer chaos run (protocol.md K4, K8, K9 for messages), on real RabbitMQ and
 * PostgreSQL (needs DATABASE_URL): 200 messages, each published twice, consumed by three
 * consumer processes that are SIGKILLed mid-message (and kill themselves after a commit, before
 * the ack), one of them frozen (SIGSTOP) past its lease; an outbox relay publishes the events.
 * At the end: exactly one invoice, one PSP charge and one outbox event per message, none lost.
 * The naive consumer (no idem) on the same input shows duplicates.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import amqplib from 'amqplib';
import pg from 'pg';
import { consumerTables, until } from './helpers/consumer-setup.js';
import { amqpPublisher } from '../src/amqp/index.js';
import { Outbox, OutboxRelay } from '../src/postgres/index.js';

const MESSAGES = 200;
const WORKERS = 3;
const skip = !process.env.DATABASE_URL && 'needs DATABASE_URL (processes share one PostgreSQL)';

describe('consumer chaos run on RabbitMQ', { skip }, () => {
  let pool: pg.Pool;
  let connection: amqplib.ChannelModel;
  let channel: amqplib.ConfirmChannel;
  const queues: string[] = [];
  const cleanups: Array<() => Promise<void>> = [];
  const children = new Set<ChildProcess>();
  const relayAbort = new AbortController();
  before(async () => {
    pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 8 });
    connection = await amqplib.connect('amqp://guest:guest@127.0.0.1:5672');
    channel = await connection.createConfirmChannel();
  });
  after(async () => {
    relayAbort.abort();
    for (const child of children) child.kill('SIGKILL');
    for (const q of queues) await channel.deleteQueue(q).catch(() => undefined);
    for (const fn of cleanups) await fn().catch(() => undefined);
    await connection.close();
    await pool.end();
  });

  async function start(mode: 'idem' | 'naive', queue: string, table: string, events: string): Promise<ChildProcess> {
    const script = fileURLToPath(new URL('./helpers/chaos-consumer.ts', import.meta.url));
    const child = spawn(process.execPath, ['--import', 'tsx', script, mode, queue, table, events], { env: process.env, stdio: ['ignore', 'pipe', 'inherit'] });
    children.add(child);
    child.once('exit', () => children.delete(child));
    await new Promise<void>((resolve, reject) => {
      child.once('exit', (code, signal) => reject(new Error(`chaos consumer exited early (${code ?? signal})`)));
      createInterface({ input: child.stdout! }).on('line', (line) => line === 'READY' && resolve());
    });
    return child;
  }

  async function setup() {
    const t = await consumerTables(pool);
    await pool.query(`CREATE TABLE ${t.table}_psp (idempotency_key text PRIMARY KEY, message_id text NOT NULL)`);
    const outbox = new Outbox({ client: pool, table: t.table });
    await outbox.migrate();
    cleanups.push(async () => {
      await pool.query(`DROP TABLE IF EXISTS ${t.table}_psp`);
      await pool.query(`DROP TABLE IF EXISTS ${t.table}_outbox`);
      await t.drop();
    });
    const queue = `idem-chaos-${randomBytes(5).toString('hex')}`;
    const events = `${queue}-events`;
    queues.push(queue, events, `${queue}.idem-retry`);
    await channel.assertQueue(queue, { durable: false });
    await channel.assertQueue(events, { durable: false });
    const ids = Array.from({ length: MESSAGES }, () => randomUUID());
    const publishAll = async () => {
      const publish = amqpPublisher(channel);
      // Each message twice, the copies shuffled in: a publisher's retry.
      const sends = [...ids, ...ids].sort(() => Math.random() - 0.5);
      for (const id of sends) await publish({ id, destination: queue, body: new TextEncoder().encode(id), contentType: 'text/plain' });
    };
    const perMessage = async (sql: string) => {
      const rows = (await pool.query(sql)).rows as Array<{ id: string; n: number }>;
      return new Map(rows.map((r) => [r.id, Number(r.n)]));
    };
    const tally = async () => ({
      invoices: await perMessage(`SELECT message_id AS id, count(*)::int AS n FROM ${t.table}_effects GROUP BY 1`),
      charges: await perMessage(`SELECT message_id AS id, count(*)::int AS n FROM ${t.table}_psp GROUP BY 1`),
      outbox: await perMessage(`SELECT substr(message_id, 17) AS id, count(*)::int AS n FROM ${t.table}_outbox GROUP BY 1`),
    });
    return { ...t, outbox, queue, events, ids, publishAll, tally };
  }

  it(`idem: ${MESSAGES} messages × 2 copies, consumers killed, frozen and dropping acks → one invoice, charge and event each`, async () => {
    const s = await setup();
    const workers: ChildProcess[] = [];
    for (let i = 0; i < WORKERS; i++) workers.push(await start('idem', s.queue, s.table, s.events));
    const relay = new OutboxRelay({ outbox: s.outbox, publish: amqpPublisher(channel), batchSize: 50 }).run({ signal: relayAbort.signal, idleMs: 100 });
    await s.publishAll();
    let kills = 0;
    let frozen = false;
    const done = async () => Number((await pool.query(`SELECT count(*)::int AS n FROM ${s.table} WHERE state = 'done'`)).rows[0]!.n) === MESSAGES;
    const stopAt = performance.now() + 180_000;
    while (!(await done())) {
      assert.ok(performance.now() < stopAt, 'the run finished within 3 minutes');
      await new Promise((r) => setTimeout(r, 200));
      const i = Math.floor(Math.random() * workers.length);
      const victim = workers[i]!;
      if (!frozen && kills === 3) {
        // Frozen past its lease (2 s) and past the broker's heartbeat: its messages go elsewhere.
        frozen = true;
        victim.kill('SIGSTOP');
        setTimeout(() => victim.kill('SIGCONT'), 5000).unref();
        continue;
      }
      if (kills < 12 || victim.exitCode !== null || victim.signalCode !== null) {
        if (victim.exitCode === null && victim.signalCode === null) {
          victim.kill('SIGKILL');
          kills++;
        }
        workers[i] = await start('idem', s.queue, s.table, s.events);
      }
    }
    await until(async () => (await s.outbox.pending()) === 0, 60_000, 'the relay to drain the outbox');
    relayAbort.abort();
    await relay;
    const { invoices, charges, outbox } = await s.tally();
    const check = (name: string, map: Map<string, number>) => {
      const missing = s.ids.filter((id) => !map.has(id)).length;
      const duplicated = [...map.values()].filter((n) => n > 1).length;
      assert.equal(missing, 0, `${name}: none lost`);
      assert.equal(duplicated, 0, `${name}: none duplicated`);
      assert.equal(map.size, MESSAGES, `${name}: one per message`);
    };
    check('invoices', invoices);
    check('PSP charges', charges);
    check('outbox events', outbox);
    const delivered = (await channel.checkQueue(s.events)).messageCount;
    assert.ok(delivered >= MESSAGES, `every event published (${delivered}, repeats allowed)`);
    assert.ok(kills >= 5, `consumers killed: ${kills}`);
    console.log(`# consumer chaos: ${MESSAGES} messages ×2, ${kills} kills + self-kills after commit, 1 freeze; 0 duplicate invoices, charges, events; 0 lost`);
  });

  it('naive consumer (no idem) on the same input: duplicates', async () => {
    const s = await setup();
    for (let i = 0; i < WORKERS; i++) await start('naive', s.queue, s.table, s.events);
    await s.publishAll();
    await until(async () => Number((await pool.query(`SELECT count(*)::int AS n FROM ${s.table}_effects`)).rows[0]!.n) >= 2 * MESSAGES, 120_000, 'every copy processed');
    const { invoices, charges } = await s.tally();
    const dupInvoices = [...invoices.values()].filter((n) => n > 1).length;
    const dupCharges = [...charges.values()].filter((n) => n > 1).length;
    assert.ok(dupInvoices > 0, 'the naive consumer makes duplicate invoices');
    assert.ok(dupCharges > 0, 'and duplicate charges');
    console.log(`# naive consumer: ${dupInvoices} of ${MESSAGES} messages with duplicate invoices, ${dupCharges} with duplicate charges`);
  });
});
