/**
 * NATS JetStream: an `order-placed` stream consumed through idem (`idem/nats`, on
 * @nats-io/jetstream). Each message's `Nats-Msg-Id` header is its idempotency key: the first
 * delivery creates the invoice (examples/shared/invoices.ts) and is acked once the key is
 * finished; a redelivery (or a copy past JetStream's own duplicate window) is acked as a
 * duplicate without running the handler; a handler that throws is nak'ed with a delay, up to
 * `maxAttempts`. While the handler runs, idem keeps the message alive (`working()`) within
 * `ackWaitMs`.
 *
 * Run: `NATS_URL=127.0.0.1:4222 npx tsx examples/nats/consumer.ts` (PostgreSQL at DATABASE_URL,
 * else an in-memory PGlite).
 */
// #region consumer
import { AckPolicy, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { type Disposition, IdempotentConsumer } from 'idem/consumer';
import { consumeJetStream } from 'idem/nats';
import { PostgresStore, type Queryable, type SqlClient } from 'idem/postgres';
import { isMain, openDb } from '../shared/db.js';
import { createInvoice, migrateInvoices } from '../shared/invoices.js';

export interface NatsExampleOptions {
  js: JetStreamClient;
  jsm: JetStreamManager;
  /** A pg.Pool or a PGlite. */
  db: SqlClient & Queryable;
  /** The stream, its subject and its durable consumer, also the keys' scope. @default 'order-placed' */
  stream?: string;
  /** idem's table. @default 'idem_keys' */
  table?: string;
  /** The invoices table. @default 'invoices' */
  invoices?: string;
  /** Called with each delivery's outcome (ack, retry, dead-letter) and its reason. */
  onDisposition?: (disposition: Disposition, message: { id: string }) => void;
}

/** Consumes until `stop()`; resolves `done` once the deliveries in flight are settled. */
export async function startConsumer({ js, jsm, db, stream = 'order-placed', table = 'idem_keys', invoices = 'invoices', onDisposition }: NatsExampleOptions) {
  const store = new PostgresStore({ client: db, table });
  await store.migrate();
  await migrateInvoices(db, invoices);
  await jsm.streams.add({ name: stream, subjects: [stream] });
  await jsm.consumers.add(stream, { durable_name: stream, ack_policy: AckPolicy.Explicit, ack_wait: 30_000_000_000 }); // 30 s, in ns
  const messages = await (await js.consumers.get(stream, stream)).consume();
  const consumer = new IdempotentConsumer<Queryable>({ store, scope: stream });
  const done = consumeJetStream({ messages, consumer, handler: (ctx) => createInvoice(ctx, invoices), ackWaitMs: 30_000, onDisposition });
  return { done, stop: () => messages.close() };
}
// #endregion consumer

// #region main
if (isMain(import.meta.url)) {
  const { connect } = await import('@nats-io/transport-node');
  const { jetstream, jetstreamManager } = await import('@nats-io/jetstream');
  const nc = await connect({ servers: process.env.NATS_URL ?? '127.0.0.1:4222' });
  const consuming = await startConsumer({
    js: jetstream(nc),
    jsm: await jetstreamManager(nc),
    db: await openDb(),
    onDisposition: (d, m) => console.log(`${m.id}: ${d.action} (${d.reason})`),
  });
  console.log('consuming order-placed; publish with a Nats-Msg-Id header, Ctrl-C to stop');
  process.once('SIGINT', async () => {
    await consuming.stop();
    await consuming.done; // the deliveries in flight are settled
    await nc.close();
  });
}
// #endregion main
