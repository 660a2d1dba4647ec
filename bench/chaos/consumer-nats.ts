/**
 * NATS JetStream for the consumer chaos run (`npm run chaos -- --consumer nats`): a work stream
 * and an events stream named after the run's queue, a durable pull consumer with explicit acks
 * (`ack_wait` 4 s: a killed consumer's messages come back after it), and the publishers.
 * Both copies of a message are published WITHOUT `Nats-Msg-Id` (JetStream would drop the second
 * as a duplicate within its window); the message id travels in the `Idem-Id` header, which the
 * workers take as the key (consumeJetStream's `messageId`).
 */
import { connect, headers } from '@nats-io/transport-node';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { jetStreamPublisher } from '../../src/nats/index.js';
import type { OutgoingMessage, Publisher } from '../../src/consumer/index.js';

/** The work consumer's ack wait, in ms: above the workers' lease (2 s). */
export const NATS_ACK_WAIT_MS = 4000;
/** The header carrying a message's id (the idempotency key). */
export const ID_HEADER = 'Idem-Id';

export async function natsBroker() {
  const nc = await connect({ servers: process.env.NATS_URL ?? '127.0.0.1:4222' });
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  const streams: string[] = [];
  return {
    async setUp(queue: string, events: string) {
      for (const name of [queue, events]) {
        await jsm.streams.add({ name, subjects: [name] });
        streams.push(name);
      }
      await jsm.consumers.add(queue, { durable_name: queue, ack_policy: AckPolicy.Explicit, ack_wait: NATS_ACK_WAIT_MS * 1_000_000 });
    },
    /** Publishes one copy of a work message (id in {@link ID_HEADER}). */
    publishCopy: (async (message: OutgoingMessage) => {
      const h = headers();
      h.set(ID_HEADER, message.id);
      if (message.contentType) h.set('Content-Type', message.contentType);
      await js.publish(message.destination, message.body, { headers: h });
    }) as Publisher,
    /** The outbox relay's publisher (events carry `Nats-Msg-Id`). */
    publisher: jetStreamPublisher(js),
    async tearDown() {
      for (const s of streams) await jsm.streams.delete(s).catch(() => undefined);
      await nc.close().catch(() => undefined);
    },
  };
}
