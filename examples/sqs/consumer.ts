/**
 * Amazon SQS outside Lambda (an ECS or EKS worker): an `order-placed` queue long-polled through
 * idem (`idem/sqs`, on @aws-sdk/client-sqs). The producer puts the order id in the `idem-key`
 * message attribute and keeps it across its retries: that is the idempotency key, so a message
 * SQS delivers twice, or a producer sends twice, creates one invoice (examples/shared/invoices.ts).
 * The message is deleted only once the key is finished; a handler that throws comes back after a
 * delay (ChangeMessageVisibility), and after `maxAttempts` receives it goes to the dead-letter
 * queue with an `idem-reason` attribute. While the handler runs, idem extends the message's
 * visibility and the key's lease together.
 *
 * Run: `SQS_ENDPOINT=http://127.0.0.1:4566 npx tsx examples/sqs/consumer.ts` against an emulator
 * (`npx fauxqs`), or with AWS credentials and no SQS_ENDPOINT against SQS (PostgreSQL at
 * DATABASE_URL, else an in-memory PGlite).
 */
import { CreateQueueCommand, SQSClient } from '@aws-sdk/client-sqs';
import { type Disposition, IdempotentConsumer } from 'idem/consumer';
import { PostgresStore, type Queryable, type SqlClient } from 'idem/postgres';
import { SqsConsumer } from 'idem/sqs';
import { isMain, openDb } from '../shared/db.js';
import { createInvoice, migrateInvoices } from '../shared/invoices.js';

export interface SqsExampleOptions {
  sqs: SQSClient;
  /** A pg.Pool or a PGlite. */
  db: SqlClient & Queryable;
  /** The queue, also the keys' scope; its dead-letter queue is `<queue>-dlq`. @default 'order-placed' */
  queue?: string;
  /** idem's table. @default 'idem_keys' */
  table?: string;
  /** The invoices table. @default 'invoices' */
  invoices?: string;
  /** Long-poll seconds of each receive (a stop waits for the poll under way). @default 20 */
  waitTimeSeconds?: number;
  /** Called with each message's outcome (ack, retry, dead-letter) and its reason. */
  onDisposition?: (disposition: Disposition, message: { id: string }) => void;
}

/** Consumes until `stop()`, which resolves once the messages in flight are settled. */
export async function startConsumer({
  sqs,
  db,
  queue = 'order-placed',
  table = 'idem_keys',
  invoices = 'invoices',
  waitTimeSeconds,
  onDisposition,
}: SqsExampleOptions) {
  const store = new PostgresStore({ client: db, table });
  await store.migrate();
  await migrateInvoices(db, invoices);
  const { QueueUrl: queueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: queue }));
  const { QueueUrl: deadLetterQueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: `${queue}-dlq` }));
  const consumer = new IdempotentConsumer<Queryable>({ store, scope: queue, maxAttempts: 5 });
  const running = new SqsConsumer({
    client: sqs,
    queueUrl: queueUrl!,
    deadLetterQueueUrl,
    consumer,
    handler: (ctx) => createInvoice(ctx, invoices),
    messageId: { attribute: 'idem-key' }, // the producer's order id, not SQS's MessageId
    visibilityTimeoutSec: 60, // the key's lease: 40 s, extended with the visibility every 13 s
    waitTimeSeconds,
    onDisposition,
  }).start();
  return { queueUrl: queueUrl!, deadLetterQueueUrl: deadLetterQueueUrl!, stop: () => running.stop() };
}

if (isMain(import.meta.url)) {
  const endpoint = process.env.SQS_ENDPOINT;
  const sqs = new SQSClient(endpoint ? { endpoint, region: 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } } : {});
  const consuming = await startConsumer({ sqs, db: await openDb(), onDisposition: (d, m) => console.log(`${m.id}: ${d.action} (${d.reason})`) });
  console.log(`consuming ${consuming.queueUrl}; send with an idem-key attribute, Ctrl-C to stop`);
  process.once('SIGINT', async () => {
    await consuming.stop(); // the messages in flight are settled
    sqs.destroy();
  });
}
