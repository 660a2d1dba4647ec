/**
 * A poison message does not take its neighbours with it (protocol.md K23 5), with real
 * processes: a consumer with 4 messages in flight (RabbitMQ prefetch 4, NATS JetStream
 * concurrency 4, idem on PostgreSQL) gets one poison message, whose handler SIGKILLs the
 * process whenever it runs, and three ordinary ones that are in flight with it
 * (test/helpers/poison-process.ts). This file restarts the consumer after every death, as a
 * supervisor would, once the dead process's leases ran out. The poison is dead-lettered after
 * exactly `maxAttempts` (3) crashes; each ordinary message is processed once and never
 * dead-lettered, though it was in flight at the first crash.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { consumerTables, until } from './helpers/consumer-setup.js';
import { spawnTs } from './helpers/process.js';
import { needs, serviceUrl } from './helpers/services.js';
import { dataKey } from '../src/core/data-key.js';

const SCRIPT = fileURLToPath(new URL('./helpers/poison-process.ts', import.meta.url));
const MAX_ATTEMPTS = 3;
/** Restarts allowed before the test gives up. */
const RESTARTS = MAX_ATTEMPTS + 4;
const DATABASE_URL = process.env.DATABASE_URL;
const AMQP_URL = serviceUrl('AMQP_URL');
const NATS_URL = process.env.NATS_URL;
const nanos = (ms: number) => ms * 1_000_000;

interface Broker {
  name: 'amqp' | 'nats';
  skip: string | false;
  /** Creates the queue or stream, publishes the messages, returns its name and the env of the child. */
  setup(ids: string[]): Promise<{ name: string; dead: string; env: Record<string, string> }>;
  /** The ids found dead-lettered by the broker itself (RabbitMQ's dead-letter queue), or undefined. */
  deadLettered?(dead: string): Promise<string[]>;
  close(): Promise<void>;
}

const brokers: Broker[] = [];
{
  let connection: import('amqplib').ChannelModel | undefined;
  let channel: import('amqplib').ConfirmChannel | undefined;
  const queues: string[] = [];
  brokers.push({
    name: 'amqp',
    skip: needs('DATABASE_URL', 'AMQP_URL'),
    async setup(ids) {
      const amqplib = await import('amqplib');
      connection ??= await amqplib.connect(AMQP_URL!);
      channel ??= await connection.createConfirmChannel();
      const ch = channel;
      const name = `idem-poison-${randomBytes(4).toString('hex')}`;
      const dead = `${name}.dead`;
      queues.push(name, `${name}.idem-retry`, dead);
      await ch.assertQueue(name, { durable: true });
      await ch.assertQueue(dead, { durable: true });
      for (const id of ids) {
        await new Promise<void>((resolve, reject) =>
          ch.sendToQueue(name, Buffer.from(`{"order":"${id}"}`), { messageId: id, contentType: 'application/json', persistent: true }, (err) =>
            err ? reject(err) : resolve(),
          ),
        );
      }
      return { name, dead, env: { AMQP_URL: AMQP_URL! } };
    },
    async deadLettered(dead) {
      const found: string[] = [];
      for (;;) {
        const m = await channel!.get(dead, { noAck: true });
        if (!m) return found;
        found.push(String(m.properties.messageId));
      }
    },
    async close() {
      for (const q of queues) await channel?.deleteQueue(q).catch(() => undefined);
      await connection?.close();
    },
  });
}
{
  let nc: import('@nats-io/transport-node').NatsConnection | undefined;
  const streams: string[] = [];
  brokers.push({
    name: 'nats',
    skip: needs('DATABASE_URL', 'NATS_URL'),
    async setup(ids) {
      const { connect } = await import('@nats-io/transport-node');
      const { AckPolicy, jetstream, jetstreamManager } = await import('@nats-io/jetstream');
      nc ??= await connect({ servers: NATS_URL! });
      const jsm = await jetstreamManager(nc);
      const name = `idem-poison-${randomBytes(4).toString('hex')}`;
      streams.push(name);
      await jsm.streams.add({ name, subjects: [name] });
      // ack_wait 2 s: JetStream redelivers a dead process's messages after it.
      await jsm.consumers.add(name, { durable_name: name, ack_policy: AckPolicy.Explicit, ack_wait: nanos(2000), max_ack_pending: 4 });
      const js = jetstream(nc);
      for (const id of ids) await js.publish(name, new TextEncoder().encode(`{"order":"${id}"}`), { msgID: id });
      return { name, dead: '', env: { NATS_URL: NATS_URL! } };
    },
    async close() {
      if (!nc) return;
      const { jetstreamManager } = await import('@nats-io/jetstream');
      const jsm = await jetstreamManager(nc);
      for (const s of streams) await jsm.streams.delete(s).catch(() => undefined);
      await nc.close();
    },
  });
}

for (const broker of brokers) {
  describe(`a poison message among 4 in flight (${broker.name}, idem on PostgreSQL)`, { skip: broker.skip }, () => {
    let pool: pg.Pool;
    const drops: Array<() => Promise<void>> = [];
    before(() => {
      pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    });
    after(async () => {
      await broker.close();
      for (const drop of drops) await drop();
      await pool.end();
    });

    it(`the poison is dead-lettered after ${MAX_ATTEMPTS} crashes; its 3 neighbours are processed once each, none dead-lettered`, {
      timeout: 600_000,
    }, async () => {
      const tables = await consumerTables(pool);
      drops.push(tables.drop);
      const poison = randomUUID();
      const neighbours = [randomUUID(), randomUUID(), randomUUID()];
      const ids = [neighbours[0]!, poison, neighbours[1]!, neighbours[2]!];
      const { name, dead, env } = await broker.setup(ids);
      const dispositions: string[] = [];
      let runs = 0;
      let crashes = 0;
      const settled = () =>
        dispositions.includes(`${poison} dead-letter max-attempts`) && neighbours.every((id) => dispositions.some((d) => d.startsWith(`${id} `)));
      for (let restart = 0; restart <= RESTARTS && !settled(); restart++) {
        // As a supervisor restarting a crashed consumer: the dead process's leases have run out.
        await until(
          async () => {
            for (const id of ids) {
              const record = await tables.store.get(name, dataKey(id), 86_400_000);
              if (record?.state === 'started' && !record.leaseExpired) return false;
            }
            return true;
          },
          30_000,
          'the dead consumer leases ran out',
        );
        const child = spawnTs(SCRIPT, { DATABASE_URL: DATABASE_URL!, ...env }, [broker.name, name, tables.table, poison, dead, 'gate']);
        await child.waitFor(/READY/);
        let exited = false;
        void child.exited.then(() => (exited = true));
        const seenNow = () => [...child.output().matchAll(/^DISPOSITION (\S+ \S+ \S+)$/gm)].map((m) => m[1]!);
        await until(
          () => exited || settled() || [...dispositions, ...seenNow()].includes(`${poison} dead-letter max-attempts`),
          120_000,
          `the consumer died or settled:\n${child.output()}`,
        );
        if (!exited) {
          // The poison is dead-lettered: wait for the neighbours' ends, then stop the consumer.
          await until(
            () => neighbours.every((id) => [...dispositions, ...seenNow()].some((d) => d.startsWith(`${id} `) && !d.includes(' retry '))),
            60_000,
            'the neighbours settled',
          );
          await child.kill();
        } else crashes++;
        const out = child.output();
        if (process.env.POISON_DEBUG) console.log(`--- start ${restart}\n${out}`);
        runs += [...out.matchAll(new RegExp(`^RUN ${poison}$`, 'gm'))].length;
        dispositions.push(...[...out.matchAll(/^DISPOSITION (\S+ \S+ \S+)$/gm)].map((m) => m[1]!).filter((d) => !d.includes(' retry ')));
      }
      assert.ok(settled(), `not settled after ${RESTARTS + 1} starts: ${dispositions.join(', ')}`);
      const deadLettered = dispositions.filter((d) => d.includes(' dead-letter '));
      assert.deepEqual(deadLettered, [`${poison} dead-letter max-attempts`], 'only the poison is dead-lettered');
      assert.equal(crashes, MAX_ATTEMPTS, 'the consumer died maxAttempts times');
      assert.equal(runs, MAX_ATTEMPTS, 'the poison ran maxAttempts times, then never again');
      for (const id of neighbours) {
        // Its ack (or the line saying so) may die with a process that crashed just after its
        // finish committed: the redelivery is then acked as a duplicate, never run again.
        assert.ok(
          dispositions.filter((d) => d.startsWith(`${id} `)).every((d) => d === `${id} ack processed` || d === `${id} ack duplicate`),
          `neighbour ${id} is acked: ${dispositions.join(', ')}`,
        );
        const record = await tables.store.get(name, dataKey(id), 86_400_000);
        assert.equal(record?.state, 'done', `neighbour ${id} finished`);
      }
      const rows = (await tables.sql.query(`SELECT message_id, note, count(*)::int AS n FROM ${tables.table}_effects GROUP BY 1, 2`)).rows;
      const effects = new Map(rows.map((r) => [`${r.message_id} ${r.note}`, Number(r.n)]));
      for (const id of neighbours) {
        assert.equal(effects.get(`${id} invoice`), 1, 'one invoice per neighbour');
        assert.equal(effects.get(`${id} event`), 1, 'one event per neighbour');
      }
      assert.equal(effects.get(`${poison} invoice`), 1, "the poison's phase committed once; its takeovers resumed after it");
      if (broker.deadLettered) assert.deepEqual(await broker.deadLettered(dead), [poison], 'the dead-letter queue holds the poison alone');
    });
  });
}
