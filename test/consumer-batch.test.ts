/**
 * Batched consumers (protocol.md K39): `IdempotentConsumer.consumeBatch` on a real store
 * (PGlite always, PostgreSQL when DATABASE_URL is set), and `consumeAmqp` / `consumeJetStream`
 * with `effects` on real brokers (skipped without AMQP_URL / NATS_URL). Effects once per
 * message id, whatever the batch does.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import amqplib from 'amqplib';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { engines, useEngine } from './helpers/engines.js';
import { needs, serviceUrl } from './helpers/services.js';
import { consumerTables, startConsumerProcess, until } from './helpers/consumer-setup.js';
import { type ConsumedMessage, type Disposition, IdempotentConsumer } from '../src/consumer/index.js';
import { amqpPublisher, consumeAmqp } from '../src/amqp/index.js';
import { consumeJetStream } from '../src/nats/index.js';
import type { Queryable } from '../src/postgres/client.js';

const json = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
const message = (id: string, body: unknown = { id }, attempt = 1): ConsumedMessage => ({ id, body: json(body), contentType: 'application/json', attempt });

for (const engine of engines) {
  describe(`IdempotentConsumer.consumeBatch on ${engine.name} (protocol.md K39)`, () => {
    const db = useEngine(engine);

    async function setup() {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: 'orders', retryDelayMs: 10 });
      let runs = 0;
      const effects = async (tx: Queryable, m: ConsumedMessage) => {
        runs++;
        await t.insert(tx, m.id);
        return { stored: m.id };
      };
      return { ...t, consumer, effects, runs: () => runs };
    }

    it('applies a batch once: every new message processed, a redelivered batch acked as duplicates without running the effects', async () => {
      const { consumer, effects, counts, runs } = await setup();
      const ids = Array.from({ length: 10 }, () => randomUUID());
      const first = await consumer.consumeBatch(
        ids.map((id) => message(id)),
        effects,
      );
      assert.deepEqual(
        first,
        ids.map(() => ({ action: 'ack', reason: 'processed' })),
      );
      assert.equal(runs(), 10);
      const again = await consumer.consumeBatch(
        ids.map((id) => message(id, { id }, 2)),
        effects,
      );
      assert.deepEqual(
        again,
        ids.map(() => ({ action: 'ack', reason: 'duplicate' })),
      );
      assert.equal(runs(), 10, 'a duplicate never runs the effects');
      const c = await counts();
      for (const id of ids) assert.equal(c.get(id), 1, id);
    });

    it('stores the effects result with the key, as ctx.complete does, and finishes the key in the same transaction', async () => {
      const { consumer, effects, store } = await setup();
      const ids = [randomUUID(), randomUUID()];
      await consumer.consumeBatch(
        ids.map((id) => message(id)),
        effects,
      );
      for (const id of ids) {
        const record = await store.get('orders', id, consumer.engine.retentionMs);
        assert.equal(record?.state, 'done');
        assert.deepEqual(JSON.parse(new TextDecoder().decode(record!.response!.body)), { stored: id });
      }
    });

    it('decides existing keys as a claim would: a finished key is a duplicate, another payload a mismatch, the same id twice in one batch runs once', async () => {
      const { consumer, effects, counts, runs } = await setup();
      const done = randomUUID();
      await consumer.consumeBatch([message(done)], effects);
      const fresh = randomUUID();
      const twice = randomUUID();
      const out = await consumer.consumeBatch([message(done), message(done + 'x'), message(fresh), message(twice), message(twice)], effects);
      const mismatch = await consumer.consumeBatch([message(done, { other: true }), message(randomUUID())], effects);
      assert.deepEqual(out[0], { action: 'ack', reason: 'duplicate' });
      assert.deepEqual(out[1], { action: 'ack', reason: 'processed' });
      assert.deepEqual(out[2], { action: 'ack', reason: 'processed' });
      assert.deepEqual([out[3], out[4]].map((d) => d?.reason).sort(), ['duplicate', 'processed']);
      assert.deepEqual(mismatch[0], { action: 'dead-letter', reason: 'mismatch' });
      assert.deepEqual(mismatch[1], { action: 'ack', reason: 'processed' });
      const c = await counts();
      assert.equal(c.get(done), 1);
      assert.equal(c.get(twice), 1);
      assert.equal(runs(), 5);
    });

    it('rolls the whole batch back when one effect throws: the others are then processed on their own, the failing one retried, nothing applied twice', async () => {
      const { consumer, insert, counts } = await setup();
      const ids = Array.from({ length: 5 }, () => randomUUID());
      const bad = ids[2]!;
      const seenInBatch: string[] = [];
      const out = await consumer.consumeBatch(
        ids.map((id) => message(id)),
        async (tx, m) => {
          seenInBatch.push(m.id);
          await insert(tx, m.id);
          if (m.id === bad) throw new Error('boom');
        },
      );
      assert.ok(seenInBatch.length > 5, 'the batch ran, rolled back, and the messages ran again on their own');
      for (const [i, id] of ids.entries()) {
        if (id === bad) assert.equal(out[i]!.action === 'retry' && out[i]!.reason, 'handler-failed');
        else assert.deepEqual(out[i], { action: 'ack', reason: 'processed' });
      }
      const c = await counts();
      for (const id of ids) assert.equal(c.get(id), id === bad ? undefined : 1, id);
    });

    it('leaves a key another consumer holds to its own path: retried as in progress, its effects never run', async () => {
      const { consumer, effects, counts } = await setup();
      const held = randomUUID();
      const begun = await consumer.engine.begin({
        scope: 'orders',
        key: held,
        fingerprint: (await import('../src/core/fingerprint.js')).fingerprint({
          method: 'MESSAGE',
          path: 'orders',
          contentType: 'application/json',
          body: json({ id: held }),
        }),
      });
      assert.equal(begun.kind, 'execute');
      const other = randomUUID();
      const out = await consumer.consumeBatch([message(held), message(other)], effects);
      assert.equal(out[0]!.action === 'retry' && out[0]!.reason, 'in-progress');
      assert.deepEqual(out[1], { action: 'ack', reason: 'processed' });
      const c = await counts();
      assert.equal(c.get(held), undefined);
      assert.equal(c.get(other), 1);
      if (begun.kind === 'execute') await begun.execution.release();
    });

    it('rolls the batch back when a key in it is claimed after the batch read it: the claim keeps the key, its effects never commit, the rest run on their own', {
      // PGlite runs one transaction at a time: a claim from inside the batch's effects would wait for it.
      skip: engine.name === 'pglite',
    }, async () => {
      const { consumer, effects, counts } = await setup();
      const [first, second, raced] = [randomUUID(), randomUUID(), randomUUID()];
      const print = (await import('../src/core/fingerprint.js')).fingerprint({
        method: 'MESSAGE',
        path: 'orders',
        contentType: 'application/json',
        body: json({ id: raced }),
      });
      let begun: Awaited<ReturnType<typeof consumer.engine.begin>> | undefined;
      const out = await consumer.consumeBatch([message(first), message(second), message(raced)], async (tx, m) => {
        // Inside the batch, after its read: another consumer claims `raced` on its own connection.
        begun ??= await consumer.engine.begin({ scope: 'orders', key: raced, fingerprint: print });
        return effects(tx, m);
      });
      assert.equal(begun?.kind, 'execute', 'the other claim won: the batch had written nothing for the key');
      assert.deepEqual(out[0], { action: 'ack', reason: 'processed' });
      assert.deepEqual(out[1], { action: 'ack', reason: 'processed' });
      assert.equal(out[2]!.action === 'retry' && out[2]!.reason, 'in-progress');
      const c = await counts();
      assert.equal(c.get(first), 1, 'applied once: the rolled-back batch left nothing');
      assert.equal(c.get(second), 1);
      assert.equal(c.get(raced), undefined, "the holder's key was never applied by the batch");
      if (begun?.kind === 'execute') await begun.execution.release();
    });

    it('applies again a key whose finished row is past retention (absent, protocol.md K6): not acked as a duplicate', async () => {
      const { consumer, effects, counts, sql, table } = await setup();
      const [old, fresh] = [randomUUID(), randomUUID()];
      assert.deepEqual(await consumer.consumeBatch([message(old)], effects), [{ action: 'ack', reason: 'processed' }]);
      await sql.query(`UPDATE ${table} SET created_at = now() - interval '400 days' WHERE key = $1`, [old]);
      const out = await consumer.consumeBatch([message(old, { id: old }, 2), message(fresh)], effects);
      assert.deepEqual(out, [
        { action: 'ack', reason: 'processed' },
        { action: 'ack', reason: 'processed' },
      ]);
      const c = await counts();
      assert.equal(c.get(old), 2, 'past retention the key counts as new: its effects ran again');
      assert.equal(c.get(fresh), 1);
    });

    it("takes over a key whose holder crashed (lease ended) once, and the crashed holder's late finish is fenced", async () => {
      const { consumer, effects, counts, sql, table } = await setup();
      const [crashed, other] = [randomUUID(), randomUUID()];
      const print = (await import('../src/core/fingerprint.js')).fingerprint({
        method: 'MESSAGE',
        path: 'orders',
        contentType: 'application/json',
        body: json({ id: crashed }),
      });
      const holder = await consumer.engine.begin({ scope: 'orders', key: crashed, fingerprint: print });
      assert.equal(holder.kind, 'execute');
      await sql.query(`UPDATE ${table} SET locked_until = now() - interval '1 second' WHERE key = $1`, [crashed]);
      const out = await consumer.consumeBatch([message(crashed, { id: crashed }, 2), message(other)], effects);
      assert.deepEqual(out, [
        { action: 'ack', reason: 'processed' },
        { action: 'ack', reason: 'processed' },
      ]);
      const c = await counts();
      assert.equal(c.get(crashed), 1, 'applied once, by the takeover');
      assert.equal(c.get(other), 1);
      if (holder.kind === 'execute') await assert.rejects(holder.execution.finish({ status: 200, headers: [], body: new Uint8Array() }));
    });

    it('dead-letters an invalid message id on its own, and processes the rest of the batch', async () => {
      const { consumer, effects, counts } = await setup();
      const ok = randomUUID();
      const out = await consumer.consumeBatch([message(''), message(ok)], effects);
      assert.equal(out[0]!.action === 'dead-letter' && out[0]!.reason, 'invalid-message');
      assert.deepEqual(out[1], { action: 'ack', reason: 'processed' });
      assert.equal((await counts()).get(ok), 1);
    });
  });

  describe(`consumeAmqp with effects, store on ${engine.name} (protocol.md K39)`, { skip: needs('AMQP_URL') }, () => {
    const db = useEngine(engine);
    let connection: amqplib.ChannelModel;
    let channel: amqplib.ConfirmChannel;
    const queues: string[] = [];
    before(async () => {
      connection = await amqplib.connect(serviceUrl('AMQP_URL') ?? '');
      channel = await connection.createConfirmChannel();
    });
    after(async () => {
      const admin = await connection.createChannel();
      for (const q of queues) await admin.deleteQueue(q).catch(() => undefined);
      await connection.close();
    });

    it('processes each message once in batches, acks the copies published twice as duplicates, and leaves the queue empty', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const q = `idem-test-${randomBytes(5).toString('hex')}`;
      queues.push(q, `${q}.idem-retry`);
      await channel.assertQueue(q, { durable: false });
      const ids = Array.from({ length: 40 }, () => randomUUID());
      const send = amqpPublisher(channel);
      // Published before the consumer starts: the first deliveries arrive together and batch.
      for (const id of [...ids, ...ids]) await send({ id, destination: q, body: json({ id }), contentType: 'application/json' });
      const seen: Disposition[] = [];
      const running = await consumeAmqp({
        channel,
        queue: q,
        consumer: new IdempotentConsumer<Queryable>({ store: t.store, scope: q }),
        prefetch: 32,
        effects: (tx, m) => t.insert(tx, m.id),
        onDisposition: (d) => seen.push(d),
      });
      await until(() => seen.length === 80, 60_000, '80 dispositions');
      await running.stop();
      assert.equal(seen.filter((d) => d.action === 'ack' && d.reason === 'processed').length, 40);
      assert.equal(seen.filter((d) => d.action === 'ack' && d.reason === 'duplicate').length, 40);
      const counts = await t.counts();
      for (const id of ids) assert.equal(counts.get(id), 1, id);
      assert.equal((await channel.checkQueue(q)).messageCount, 0, 'everything acked');
    });

    it('a consumer process SIGKILLed inside a batch: nothing of the batch committed, every message redelivered and applied once', {
      skip: engine.name !== 'postgres' && 'needs a database shared between processes',
    }, async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const q = `idem-test-${randomBytes(5).toString('hex')}`;
      queues.push(q, `${q}.idem-retry`);
      await channel.assertQueue(q, { durable: false });
      const ids = Array.from({ length: 8 }, () => randomUUID());
      const send = amqpPublisher(channel);
      for (const id of ids) await send({ id, destination: q, body: json({ id }), contentType: 'application/json' });
      const proc = await startConsumerProcess('amqp', q, t.table, 'effects');
      assert.ok((ids as string[]).includes(await proc.phase));
      await proc.kill();
      const seen: Disposition[] = [];
      const running = await consumeAmqp({
        channel,
        queue: q,
        consumer: new IdempotentConsumer<Queryable>({ store: t.store, scope: q }),
        prefetch: 8,
        effects: (tx, m) => t.insert(tx, m.id),
        onDisposition: (d) => seen.push(d),
      });
      await until(() => seen.length === ids.length, 60_000, 'every message after the crash');
      await running.stop();
      assert.ok(
        seen.every((d) => d.action === 'ack' && d.reason === 'processed'),
        JSON.stringify(seen),
      );
      const counts = await t.counts();
      for (const id of ids) assert.equal(counts.get(id), 1, id);
    });
  });

  describe(`consumeJetStream with effects, store on ${engine.name} (protocol.md K39)`, { skip: needs('NATS_URL') }, () => {
    const db = useEngine(engine);
    let nc: NatsConnection;
    const streams: string[] = [];
    before(async () => {
      nc = await connect({ servers: serviceUrl('NATS_URL') ?? '' });
    });
    after(async () => {
      const jsm = await jetstreamManager(nc);
      for (const s of streams) await jsm.streams.delete(s).catch(() => undefined);
      await nc.close();
    });

    it('processes each message once in batches, acks the copies published twice as duplicates', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const js = jetstream(nc);
      const jsm = await jetstreamManager(nc);
      const name = `idem_test_${randomBytes(5).toString('hex')}`;
      streams.push(name);
      await jsm.streams.add({ name, subjects: [name] });
      await jsm.consumers.add(name, { durable_name: name, ack_policy: AckPolicy.Explicit, ack_wait: 30_000 * 1_000_000 });
      const ids = Array.from({ length: 40 }, () => randomUUID());
      for (const id of [...ids, ...ids]) await js.publish(name, json({ id }));
      const messages = await (await js.consumers.get(name, name)).consume();
      const seen: Disposition[] = [];
      const running = consumeJetStream({
        messages,
        consumer: new IdempotentConsumer<Queryable>({ store: t.store, scope: name }),
        concurrency: 32,
        ackWaitMs: 30_000,
        // The order id in the body: two publishes of one order get past JetStream's own dedup.
        messageId: (m) => String((JSON.parse(new TextDecoder().decode(m.data)) as { id: string }).id),
        effects: (tx, m) => t.insert(tx, m.id),
        onDisposition: (d) => seen.push(d),
      });
      await until(() => seen.length === 80, 60_000, '80 dispositions');
      await messages.close();
      await running;
      assert.equal(seen.filter((d) => d.action === 'ack' && d.reason === 'processed').length, 40);
      assert.equal(seen.filter((d) => d.action === 'ack' && d.reason === 'duplicate').length, 40);
      const counts = await t.counts();
      for (const id of ids) assert.equal(counts.get(id), 1, id);
    });
  });
}
