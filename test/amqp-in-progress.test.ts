/**
 * idem/amqp gives back a delivery whose key is in progress elsewhere (protocol.md K18) without
 * counting it as a delivery: on a quorum queue with a small `x-delivery-limit`, a message held in
 * progress by another worker for many give-backs is NOT dead-lettered by the broker, its attempt
 * number stays 1, and once the holder finishes it is acked as a duplicate. Real RabbitMQ
 * (AMQP_URL) and PostgreSQL (DATABASE_URL; a store without `subscribe`, so the give-back path runs).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import amqplib from 'amqplib';
import pg from 'pg';
import { consumerTables, until } from './helpers/consumer-setup.js';
import { needs, serviceUrl } from './helpers/services.js';
import { IdempotentConsumer, type ConsumedMessage, type Disposition } from '../src/consumer/index.js';
import { amqpPublisher, consumeAmqp } from '../src/amqp/index.js';
import { fingerprint } from '../src/core/fingerprint.js';
import type { Queryable } from '../src/postgres/client.js';

const AMQP_URL = serviceUrl('AMQP_URL') ?? '';
const DELIVERY_LIMIT = 2;

describe('idem/amqp: a key in progress elsewhere on a quorum queue (protocol.md K18)', { skip: needs('AMQP_URL', 'DATABASE_URL') }, () => {
  let connection: amqplib.ChannelModel;
  let channel: amqplib.ConfirmChannel;
  let pool: pg.Pool;
  const queues: string[] = [];
  before(async () => {
    connection = await amqplib.connect(AMQP_URL);
    channel = await connection.createConfirmChannel();
    pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
  });
  after(async () => {
    const admin = await connection.createChannel();
    for (const q of queues) await admin.deleteQueue(q).catch(() => undefined);
    await connection.close();
    await pool.end();
  });

  it(`a message given back ${4 * DELIVERY_LIMIT}+ times while another worker holds its key is not dead-lettered (x-delivery-limit ${DELIVERY_LIMIT})`, async () => {
    const t = await consumerTables(pool);
    const q = `idem-inprogress-${randomBytes(4).toString('hex')}`;
    const dead = `${q}.dead`;
    queues.push(q, `${q}.idem-retry`, dead);
    await channel.assertQueue(dead, { durable: true });
    await channel.assertQueue(q, {
      durable: true,
      arguments: { 'x-queue-type': 'quorum', 'x-delivery-limit': DELIVERY_LIMIT, 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': dead },
    });
    try {
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: q, leaseMs: 60_000, heartbeatMs: 0, inProgressDelayMs: 20, maxAttempts: 3 });
      const id = randomUUID();
      const body = new TextEncoder().encode(JSON.stringify({ order: 1 }));
      // Another worker holds the key: its lease is valid for the whole test.
      const begun = await consumer.engine.begin({
        scope: q,
        key: id,
        fingerprint: fingerprint({ method: 'MESSAGE', path: q, contentType: 'application/json', body }),
      });
      assert.equal(begun.kind, 'execute');
      const seen: Array<{ d: Disposition; m: ConsumedMessage }> = [];
      let runs = 0;
      const running = await consumeAmqp({
        channel,
        queue: q,
        consumer,
        prefetch: 4,
        handler: async () => void runs++,
        onDisposition: (d, m) => seen.push({ d, m }),
      });
      await amqpPublisher(channel)({ id, destination: q, body, contentType: 'application/json' });
      const givenBack = () => seen.filter((s) => s.d.reason === 'in-progress').length;
      const deadLettered = async () => (await channel.checkQueue(dead)).messageCount > 0;
      await until(async () => givenBack() >= 4 * DELIVERY_LIMIT || (await deadLettered()), 60_000, `${4 * DELIVERY_LIMIT} in-progress give-backs`);
      assert.equal(await deadLettered(), false, `the broker dead-lettered a message that never failed, after ${givenBack()} give-backs`);
      assert.deepEqual(new Set(seen.map((s) => s.m.attempt)), new Set([1]), 'a give-back is not a delivery attempt');
      // The holder finishes: the next delivery is acked as a duplicate.
      if (begun.kind === 'execute') await begun.execution.finish({ status: 200, headers: [], body: new Uint8Array() });
      await until(() => seen.some((s) => s.d.action === 'ack'), 30_000, 'the duplicate acked');
      await running.stop();
      assert.deepEqual(seen.at(-1)!.d, { action: 'ack', reason: 'duplicate' });
      assert.equal(runs, 0, 'the handler never ran: the holder did the work');
      assert.equal(await channel.get(dead, { noAck: true }), false);
      assert.equal((await channel.checkQueue(q)).messageCount, 0, 'nothing left behind');
    } finally {
      await t.drop();
    }
  });
});
