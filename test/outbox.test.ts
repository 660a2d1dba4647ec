/**
 * The transactional outbox (idem/postgres Outbox, OutboxRelay) on PGlite and PostgreSQL, relaying
 * to a real RabbitMQ (publisher confirms) and NATS JetStream (Nats-Msg-Id) at AMQP_URL and NATS_URL (skipped without them): enqueued with the
 * phase's effects or not at all, published once by concurrent relays, repeated after a relay
 * failure and deduplicated by JetStream.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import amqplib from 'amqplib';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { engines, useEngine } from './helpers/engines.js';
import { needs, serviceUrl } from './helpers/services.js';
import { consumerTables } from './helpers/consumer-setup.js';
import { IdempotentConsumer, type Publisher } from '../src/consumer/index.js';
import { Outbox, OutboxRelay } from '../src/postgres/index.js';
import { amqpPublisher } from '../src/amqp/index.js';
import { jetStreamPublisher } from '../src/nats/index.js';
import type { Queryable } from '../src/postgres/client.js';

for (const engine of engines) {
  describe(`Outbox and OutboxRelay, store on ${engine.name}`, { skip: needs('AMQP_URL', 'NATS_URL') }, () => {
    const db = useEngine(engine);
    let amqp: amqplib.ChannelModel;
    let channel: amqplib.ConfirmChannel;
    let nc: NatsConnection;
    const queues: string[] = [];
    const streams: string[] = [];
    before(async () => {
      amqp = await amqplib.connect(serviceUrl('AMQP_URL')!);
      channel = await amqp.createConfirmChannel();
      nc = await connect({ servers: serviceUrl('NATS_URL')! });
    });
    after(async () => {
      for (const q of queues) await channel.deleteQueue(q).catch(() => undefined);
      await amqp.close();
      const jsm = await jetstreamManager(nc);
      for (const s of streams) await jsm.streams.delete(s).catch(() => undefined);
      await nc.close();
    });

    async function setup() {
      const t = await consumerTables(db.client());
      const outbox = new Outbox({ client: db.client(), table: t.table });
      await outbox.migrate();
      await outbox.migrate(); // idempotent
      db.cleanup(async () => {
        await t.sql.query(`DROP TABLE IF EXISTS ${t.table}_outbox`);
        await t.drop();
      });
      return { ...t, outbox };
    }

    it("enqueues with the phase's effects, or not at all when the phase rolls back (protocol.md K4)", async () => {
      const { store, outbox, insert } = await setup();
      const consumer = new IdempotentConsumer<Queryable>({ store, scope: 'orders' });
      const body = new TextEncoder().encode('{}');
      const failed = await consumer.consume({ id: 'm1', body }, (ctx) =>
        ctx.complete(async (tx) => {
          await outbox.enqueueJson(tx, { id: 'event-m1', destination: 'invoices', body: { order: 'm1' } });
          throw new Error('after the enqueue');
        }),
      );
      assert.equal(failed.action, 'retry');
      assert.equal(await outbox.pending(), 0, 'rolled back with the phase');
      const ok = await consumer.consume({ id: 'm1', body, attempt: 2 }, (ctx) =>
        ctx.complete(async (tx) => {
          await insert(tx, 'm1');
          await outbox.enqueueJson(tx, { id: 'event-m1', destination: 'invoices', body: { order: 'm1' } });
          await outbox.enqueueJson(tx, { id: 'event-m1', destination: 'invoices', body: { order: 'again' } });
        }),
      );
      assert.deepEqual(ok, { action: 'ack', reason: 'processed' });
      assert.equal(await outbox.pending(), 1, 'committed with the finish; a repeated id is kept once');
    });

    it('three concurrent relays publish every message exactly once to RabbitMQ, with confirms, and mark them sent', async () => {
      const { outbox, sql, table } = await setup();
      const q = `idem-test-${randomBytes(5).toString('hex')}`;
      queues.push(q);
      await channel.assertQueue(q, { durable: false });
      const ids = Array.from({ length: 60 }, () => randomUUID());
      for (const id of ids) await outbox.enqueue(sql, { id, destination: q, body: id, contentType: 'text/plain' });
      const publish = amqpPublisher(channel);
      const relays = [1, 2, 3].map(() => new OutboxRelay({ outbox, publish, batchSize: 7 }));
      const drain = async (relay: OutboxRelay) => {
        let total = 0;
        for (let n = await relay.relayOnce(); n > 0; n = await relay.relayOnce()) total += n;
        return total;
      };
      const sent = await Promise.all(relays.map(drain));
      assert.equal(
        sent.reduce((a, b) => a + b, 0),
        60,
      );
      assert.equal(await outbox.pending(), 0);
      const got: string[] = [];
      for (;;) {
        const m = await channel.get(q, { noAck: true });
        if (!m) break;
        assert.equal(m.content.toString(), m.properties.messageId);
        got.push(String(m.properties.messageId));
      }
      assert.deepEqual(got.sort(), [...ids].sort(), 'each message once');
      const unsent = (await sql.query(`SELECT count(*)::int AS n FROM ${table}_outbox WHERE sent_at IS NULL`)).rows[0]!.n;
      assert.equal(unsent, 0);
    });

    it('a relay failing after the broker took a message publishes it again; JetStream drops the repeat by Nats-Msg-Id', async () => {
      const { outbox, sql } = await setup();
      const js = jetstream(nc);
      const jsm = await jetstreamManager(nc);
      const name = `idem-test-${randomBytes(5).toString('hex')}`;
      streams.push(name);
      await jsm.streams.add({ name, subjects: [name] });
      const ids = Array.from({ length: 10 }, () => randomUUID());
      for (const id of ids) await outbox.enqueue(sql, { id, destination: name, body: id });
      const real = jetStreamPublisher(js);
      let calls = 0;
      // The 5th publish reaches the stream, then the relay "dies" before recording it.
      const flaky: Publisher = async (m) => {
        await real(m);
        if (++calls === 5) throw new Error('relay lost its database connection');
      };
      const relay = new OutboxRelay({ outbox, publish: flaky });
      await assert.rejects(relay.relayOnce(), /lost its database/);
      assert.equal(await outbox.pending(), 6, 'four marked sent; the fifth is published but not marked');
      assert.equal(await relay.relayOnce(), 6);
      assert.equal(await outbox.pending(), 0);
      const info = await jsm.streams.info(name);
      assert.equal(info.state.messages, 10, 'the repeated fifth message was dropped by the duplicate window');
    });
  });
}
