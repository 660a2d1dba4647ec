/**
 * idem/nats on a real NATS JetStream (NATS_URL; .ci/run: 127.0.0.1:4222; skipped without it): ack after the commit,
 * nak with a delay, term for a dead letter, Nats-Msg-Id on the publisher, and a consumer
 * process SIGKILLed mid-message. Random stream names, deleted after.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { engines, useEngine } from './helpers/engines.js';
import { needs, serviceUrl } from './helpers/services.js';
import { consumerTables, startConsumerProcess, until } from './helpers/consumer-setup.js';
import { IdempotentConsumer, type Disposition, type MessageContext } from '../src/consumer/index.js';
import { consumeJetStream, jetStreamPublisher, type JsMsgLike } from '../src/nats/index.js';
import type { Queryable } from '../src/postgres/client.js';

const SERVERS = serviceUrl('NATS_URL') ?? '';
const nanos = (ms: number) => ms * 1_000_000;
const json = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
/** The tests' message id: the order id in the body, so two publishes of one order get past JetStream's own dedup. */
const orderId = (m: JsMsgLike) => String((JSON.parse(new TextDecoder().decode(m.data)) as { orderId: string }).orderId);

for (const engine of engines) {
  describe(`idem/nats on JetStream, store on ${engine.name}`, { skip: needs('NATS_URL') }, () => {
    const db = useEngine(engine);
    let nc: NatsConnection;
    let js: JetStreamClient;
    let jsm: JetStreamManager;
    const streams: string[] = [];
    before(async () => {
      nc = await connect({ servers: SERVERS });
      js = jetstream(nc);
      jsm = await jetstreamManager(nc);
    });
    after(async () => {
      for (const s of streams) await jsm.streams.delete(s).catch(() => undefined);
      await nc.close();
    });

    /** A stream whose only subject and durable consumer share its random name. */
    async function stream(ackWaitMs = 30_000) {
      const name = `idem-test-${randomBytes(5).toString('hex')}`;
      streams.push(name);
      await jsm.streams.add({ name, subjects: [name] });
      await jsm.consumers.add(name, { durable_name: name, ack_policy: AckPolicy.Explicit, ack_wait: nanos(ackWaitMs) });
      const messages = await (await js.consumers.get(name, name)).consume();
      return { name, messages };
    }

    it('processes each order once, acks the second publish as a duplicate; JetStream drops a repeated Nats-Msg-Id', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const { name, messages } = await stream();
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: name });
      const seen: Disposition[] = [];
      const done = consumeJetStream({
        messages,
        consumer,
        messageId: orderId,
        concurrency: 4,
        handler: (ctx) => ctx.phase('invoice', (tx) => t.insert(tx, ctx.key)),
        onDisposition: (d) => seen.push(d),
      });
      const ids = Array.from({ length: 20 }, () => randomUUID());
      const publish = jetStreamPublisher(js);
      for (const id of ids) await publish({ id: `a-${id}`, destination: name, body: json({ orderId: id }), contentType: null });
      for (const id of ids) await publish({ id: `b-${id}`, destination: name, body: json({ orderId: id }), contentType: null });
      const repeat = await js.publish(name, json({ orderId: ids[0] }), { msgID: `a-${ids[0]}` });
      assert.equal(repeat.duplicate, true, 'JetStream dropped the relay-style repeat');
      // Acks, not dispositions: with 4 in flight on a loaded machine both copies of one order can
      // overlap, and the second gets a retry (in-progress) before its redelivery is acked.
      await until(() => seen.filter((d) => d.action === 'ack').length === 40, 60_000, '40 acks');
      await messages.close();
      await done;
      assert.equal(seen.filter((d) => d.action === 'ack' && d.reason === 'processed').length, 20);
      assert.equal(seen.filter((d) => d.action === 'ack' && d.reason === 'duplicate').length, 20);
      const counts = await t.counts();
      for (const id of ids) assert.equal(counts.get(id), 1, id);
      // ack() is fire-and-forget: wait for the server to have every ack.
      await until(async () => (await jsm.consumers.info(name, name)).num_ack_pending === 0, 30_000, 'every ack');
    });

    it('naks a failed delivery with its delay and counts JetStream deliveries as attempts', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const { name, messages } = await stream();
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: name, retryDelayMs: 50 });
      const attempts: number[] = [];
      const seen: Disposition[] = [];
      const done = consumeJetStream({
        messages,
        consumer,
        handler: async (ctx: MessageContext<Queryable>) => {
          attempts.push(ctx.attempt);
          await ctx.phase('invoice', (tx) => t.insert(tx, ctx.key));
          if (ctx.attempt < 3) throw new Error('transient');
        },
        onDisposition: (d) => seen.push(d),
      });
      const id = randomUUID();
      await jetStreamPublisher(js)({ id, destination: name, body: json({ orderId: id }), contentType: null });
      await until(() => seen.some((d) => d.action === 'ack'), 60_000, 'the ack');
      await messages.close();
      await done;
      assert.deepEqual(attempts, [1, 2, 3]);
      assert.deepEqual(
        seen.map((d) => `${d.action}:${d.reason}`),
        ['retry:handler-failed', 'retry:handler-failed', 'ack:processed'],
      );
      assert.equal((await t.counts()).get(id), 1);
    });

    it('terms a payload mismatch and a message past maxAttempts; neither runs again', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const { name, messages } = await stream();
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: name, retryDelayMs: 20, maxAttempts: 2 });
      const seen: Array<{ d: Disposition; id: string }> = [];
      const done = consumeJetStream({
        messages,
        consumer,
        messageId: orderId,
        handler: async (ctx) => {
          if (ctx.key.startsWith('fail-')) throw new Error('permanent');
          await ctx.phase('invoice', (tx) => t.insert(tx, ctx.key));
        },
        onDisposition: (d, m) => seen.push({ d, id: m.id }),
      });
      const id = randomUUID();
      const publish = jetStreamPublisher(js);
      await publish({ id: `1-${id}`, destination: name, body: json({ orderId: id, amount: 1 }), contentType: null });
      await publish({ id: `2-${id}`, destination: name, body: json({ orderId: id, amount: 2 }), contentType: null });
      await publish({ id: `3-${id}`, destination: name, body: json({ orderId: `fail-${id}` }), contentType: null });
      await until(() => seen.filter((s) => s.d.action === 'dead-letter').length === 2, 60_000, 'two dead letters');
      await messages.close();
      await done;
      const dead = seen.filter((s) => s.d.action === 'dead-letter').map((s) => `${s.id}:${s.d.reason}`);
      assert.deepEqual(dead.sort(), [`${id}:mismatch`, `fail-${id}:max-attempts`].sort());
      assert.equal((await t.counts()).get(id), 1);
      // term() is fire-and-forget: wait for the server to have settled both.
      await until(async () => (await jsm.consumers.info(name, name)).num_ack_pending === 0, 30_000, 'terminated messages settled');
    });

    it('a consumer process SIGKILLed after its phase: the redelivery resumes, one invoice per message', {
      skip: engine.name !== 'postgres' && 'needs a database shared between processes',
    }, async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const name = `idem-test-${randomBytes(5).toString('hex')}`;
      streams.push(name);
      await jsm.streams.add({ name, subjects: [name] });
      // ack_wait 2 s: JetStream redelivers the dead process's message after it.
      await jsm.consumers.add(name, { durable_name: name, ack_policy: AckPolicy.Explicit, ack_wait: nanos(2000) });
      const proc = await startConsumerProcess('nats', name, t.table);
      const id = randomUUID();
      await jetStreamPublisher(js)({ id, destination: name, body: json({ orderId: id }), contentType: null });
      assert.equal(await proc.phase, id);
      await proc.kill();
      const messages = await (await js.consumers.get(name, name)).consume();
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: name, leaseMs: 1500, heartbeatMs: 500, retryDelayMs: 100 });
      const seen: Disposition[] = [];
      let resumed = false;
      const done = consumeJetStream({
        messages,
        consumer,
        handler: async (ctx) => {
          resumed = ctx.resumed;
          await ctx.phase('invoice', (tx) => t.insert(tx, ctx.key));
          await ctx.complete((tx) => t.insert(tx, ctx.key, 'event'));
        },
        onDisposition: (d) => seen.push(d),
      });
      await until(() => seen.some((d) => d.action === 'ack'), 60_000, 'the ack after the crash');
      await messages.close();
      await done;
      assert.ok(resumed, 'the redelivery took the key over and resumed');
      const rows = (await t.sql.query(`SELECT note FROM ${t.table}_effects WHERE message_id = $1 ORDER BY id`, [id])).rows.map((r) => r.note);
      assert.deepEqual(rows, ['invoice', 'event']);
    });
  });
}
