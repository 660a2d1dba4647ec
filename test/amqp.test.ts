/**
 * idem/amqp on a real RabbitMQ (AMQP_URL; .ci/run: 127.0.0.1:5672, guest/guest; skipped without it): manual acks,
 * retry through the delay queue, dead-letter copies, duplicates published twice, and a
 * consumer process SIGKILLed mid-message. Random queue names, deleted after.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import amqplib from 'amqplib';
import { engines, useEngine } from './helpers/engines.js';
import { needs, serviceUrl } from './helpers/services.js';
import { consumerTables, startConsumerProcess, until } from './helpers/consumer-setup.js';
import { IdempotentConsumer, type Disposition, type MessageContext } from '../src/consumer/index.js';
import { amqpPublisher, consumeAmqp, REASON_HEADER } from '../src/amqp/index.js';
import type { Queryable } from '../src/postgres/client.js';

const URL = serviceUrl('AMQP_URL') ?? '';

for (const engine of engines) {
  describe(`idem/amqp on RabbitMQ, store on ${engine.name}`, { skip: needs('AMQP_URL') }, () => {
    const db = useEngine(engine);
    let connection: amqplib.ChannelModel;
    let channel: amqplib.ConfirmChannel;
    const queues: string[] = [];
    before(async () => {
      connection = await amqplib.connect(URL);
      channel = await connection.createConfirmChannel();
    });
    after(async () => {
      const admin = await connection.createChannel();
      for (const q of queues) await admin.deleteQueue(q).catch(() => undefined);
      await connection.close();
    });

    async function queue() {
      const name = `idem-test-${randomBytes(5).toString('hex')}`;
      queues.push(name, `${name}.idem-retry`, `${name}.dead`);
      await channel.assertQueue(name, { durable: false });
      await channel.assertQueue(`${name}.dead`, { durable: false });
      return name;
    }
    const publish = amqpPublisher;
    const json = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));

    it('processes each message once, acks the copy published twice as a duplicate, and leaves the queue empty', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const q = await queue();
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: q });
      const seen: Disposition[] = [];
      const running = await consumeAmqp({
        channel,
        queue: q,
        consumer,
        handler: (ctx) => ctx.phase('invoice', (tx) => t.insert(tx, ctx.key)),
        onDisposition: (d) => seen.push(d),
      });
      const ids = Array.from({ length: 20 }, () => randomUUID());
      const send = publish(channel);
      for (const id of ids) await send({ id, destination: q, body: json({ id }), contentType: 'application/json' });
      for (const id of ids) await send({ id, destination: q, body: json({ id }), contentType: 'application/json' });
      await until(() => seen.length === 40, 60_000, '40 dispositions');
      await running.stop();
      assert.equal(seen.filter((d) => d.action === 'ack' && d.reason === 'processed').length, 20);
      assert.equal(seen.filter((d) => d.action === 'ack' && d.reason === 'duplicate').length, 20);
      const counts = await t.counts();
      assert.equal(counts.size, 20);
      for (const id of ids) assert.equal(counts.get(id), 1, id);
      assert.equal((await channel.checkQueue(q)).messageCount, 0, 'everything acked');
    });

    it('retries a failed delivery through the delay queue with its attempt counted, then processes it', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const q = await queue();
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: q, retryDelayMs: 50 });
      const attempts: number[] = [];
      const seen: Disposition[] = [];
      const running = await consumeAmqp({
        channel,
        queue: q,
        consumer,
        handler: async (ctx: MessageContext<Queryable>) => {
          attempts.push(ctx.attempt);
          await ctx.phase('invoice', (tx) => t.insert(tx, ctx.key));
          if (ctx.attempt < 3) throw new Error('transient');
        },
        onDisposition: (d) => seen.push(d),
      });
      const id = randomUUID();
      await publish(channel)({ id, destination: q, body: json(1), contentType: 'application/json' });
      await until(() => seen.some((d) => d.action === 'ack'), 60_000, 'the ack');
      await running.stop();
      assert.deepEqual(attempts, [1, 2, 3]);
      assert.deepEqual(
        seen.map((d) => `${d.action}:${d.reason}`),
        ['retry:handler-failed', 'retry:handler-failed', 'ack:processed'],
      );
      assert.equal((await t.counts()).get(id), 1, 'the invoice phase ran once; later attempts resumed after it');
    });

    it('dead-letters a payload mismatch and a message past maxAttempts, with the reason header', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const q = await queue();
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: q, retryDelayMs: 20, maxAttempts: 2 });
      const seen: Disposition[] = [];
      const running = await consumeAmqp({
        channel,
        queue: q,
        consumer,
        deadLetter: { exchange: '', routingKey: `${q}.dead` },
        handler: async (ctx) => {
          if (ctx.key.startsWith('fail-')) throw new Error('permanent');
          await ctx.phase('invoice', (tx) => t.insert(tx, ctx.key));
        },
        onDisposition: (d) => seen.push(d),
      });
      const send = publish(channel);
      const id = randomUUID();
      await send({ id, destination: q, body: json({ amount: 1 }), contentType: 'application/json' });
      await until(() => seen.length === 1, 60_000, 'the first message');
      await send({ id, destination: q, body: json({ amount: 2 }), contentType: 'application/json' });
      await send({ id: `fail-${id}`, destination: q, body: json(0), contentType: 'application/json' });
      await until(async () => (await channel.checkQueue(`${q}.dead`)).messageCount === 2, 60_000, 'two dead letters');
      await running.stop();
      const reasons: string[] = [];
      for (;;) {
        const m = await channel.get(`${q}.dead`, { noAck: true });
        if (!m) break;
        reasons.push(`${m.properties.messageId}:${m.properties.headers?.[REASON_HEADER]}`);
      }
      assert.deepEqual(reasons.sort(), [`${id}:mismatch`, `fail-${id}:max-attempts`].sort());
      assert.equal((await t.counts()).get(id), 1, 'the mismatching payload never ran');
    });

    it('a consumer process SIGKILLed after its phase: the redelivery resumes, one invoice per message', {
      skip: engine.name !== 'postgres' && 'needs a database shared between processes',
    }, async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const q = await queue();
      const proc = await startConsumerProcess('amqp', q, t.table);
      const id = randomUUID();
      await publish(channel)({ id, destination: q, body: json({ id }), contentType: 'application/json' });
      assert.equal(await proc.phase, id);
      await proc.kill();
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: q, leaseMs: 1500, heartbeatMs: 500, retryDelayMs: 100 });
      const seen: Disposition[] = [];
      let resumed = false;
      const running = await consumeAmqp({
        channel,
        queue: q,
        consumer,
        handler: async (ctx) => {
          resumed = ctx.resumed;
          await ctx.phase('invoice', (tx) => t.insert(tx, ctx.key));
          await ctx.complete((tx) => t.insert(tx, ctx.key, 'event'));
        },
        onDisposition: (d) => seen.push(d),
      });
      await until(() => seen.some((d) => d.action === 'ack'), 60_000, 'the ack after the crash');
      await running.stop();
      assert.ok(resumed, 'the redelivery took the key over and resumed');
      const rows = (await t.sql.query(`SELECT note FROM ${t.table}_effects WHERE message_id = $1 ORDER BY id`, [id])).rows.map((r) => r.note);
      assert.deepEqual(rows, ['invoice', 'event']);
    });
  });
}
