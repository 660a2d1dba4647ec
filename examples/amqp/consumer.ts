/**
 * RabbitMQ: an `order-placed` queue consumed through idem (`idem/amqp`, on amqplib). Each
 * message's AMQP `message-id` is its idempotency key: the first delivery creates the invoice
 * (examples/shared/invoices.ts) and is acked once the key is finished; a redelivery or a second
 * copy is acked as a duplicate without running the handler; a handler that throws is retried
 * through `<queue>.idem-retry`, with backoff, up to `maxAttempts`.
 *
 * Run: `AMQP_URL=amqp://guest:guest@127.0.0.1:5672 npx tsx examples/amqp/consumer.ts`
 * (PostgreSQL at DATABASE_URL, else an in-memory PGlite).
 */
// #region consumer
import { type AmqpConsumer, consumeAmqp } from 'idem/amqp';
import { type Disposition, IdempotentConsumer } from 'idem/consumer';
import { PostgresStore, type Queryable, type SqlClient } from 'idem/postgres';
import type { ConfirmChannel } from 'amqplib';
import { isMain, openDb } from '../shared/db.js';
import { createInvoice, migrateInvoices } from '../shared/invoices.js';

export interface AmqpExampleOptions {
  /** A confirm channel: `await connection.createConfirmChannel()`. */
  channel: ConfirmChannel;
  /** A pg.Pool or a PGlite. */
  db: SqlClient & Queryable;
  /** The queue, also the keys' scope. @default 'order-placed' */
  queue?: string;
  /** idem's table. @default 'idem_keys' */
  table?: string;
  /** The invoices table. @default 'invoices' */
  invoices?: string;
  /** Called with each delivery's outcome (ack, retry, dead-letter) and its reason. */
  onDisposition?: (disposition: Disposition, message: { id: string }) => void;
}

export async function startConsumer({
  channel,
  db,
  queue = 'order-placed',
  table = 'idem_keys',
  invoices = 'invoices',
  onDisposition,
}: AmqpExampleOptions): Promise<AmqpConsumer> {
  const store = new PostgresStore({ client: db, table });
  await store.migrate();
  await migrateInvoices(db, invoices);
  await channel.assertQueue(queue);
  const consumer = new IdempotentConsumer<Queryable>({ store, scope: queue });
  return consumeAmqp({ channel, queue, consumer, handler: (ctx) => createInvoice(ctx, invoices), onDisposition });
}
// #endregion consumer

// #region main
if (isMain(import.meta.url)) {
  const { default: amqplib } = await import('amqplib');
  const connection = await amqplib.connect(process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672');
  const channel = await connection.createConfirmChannel();
  const consuming = await startConsumer({ channel, db: await openDb(), onDisposition: (d, m) => console.log(`${m.id}: ${d.action} (${d.reason})`) });
  console.log('consuming order-placed; publish with a message-id, e.g. amqp-publish, Ctrl-C to stop');
  process.once('SIGINT', async () => {
    await consuming.stop(); // waits for the deliveries in flight
    await connection.close();
  });
}
// #endregion main
