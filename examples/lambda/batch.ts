/**
 * SQS, Kinesis and DynamoDB stream batches with idem (docs/guides/lambda-batches.md): each
 * record's effects committed once per message id, the partial batch response so a redelivery
 * runs only the records not yet done. Turn on `ReportBatchItemFailures` on the event source
 * mapping.
 */
import middy from '@middy/core';
import type {
  Context,
  DynamoDBRecord,
  DynamoDBStreamEvent,
  DynamoDBStreamHandler,
  KinesisStreamHandler,
  SQSBatchResponse,
  SQSEvent,
  SQSHandler,
} from 'aws-lambda';
import pg from 'pg';
import { batchIdempotency, dynamoDbBatch, kinesisBatch, sqsBatch } from 'idem/lambda';
import { PostgresStore, type Queryable } from 'idem/postgres';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const store = new PostgresStore({ client: pool });

// #region sqs
/** An SQS queue (standard or FIFO): one order row per message, however often SQS delivers it. */
export const ordersHandler: SQSHandler = sqsBatch<Queryable>({ store, scope: 'orders-queue' }, async (record, ctx) => {
  const order = JSON.parse(record.body) as { id: string; amountCents: number };
  await ctx.complete((tx) => tx.query('INSERT INTO orders (id, amount_cents) VALUES ($1, $2)', [order.id, order.amountCents]));
});
// #endregion sqs

// #region streams
/** A Kinesis stream: the event id is the key; records of the shard stay in order. */
export const clicksHandler: KinesisStreamHandler = kinesisBatch<Queryable>({ store, scope: 'clicks-stream' }, async (record, ctx) => {
  const click = JSON.parse(Buffer.from(record.kinesis.data, 'base64').toString('utf8')) as { page: string };
  await ctx.phase('counted', (tx) => tx.query('UPDATE pages SET clicks = clicks + 1 WHERE path = $1', [click.page]));
});

/**
 * A DynamoDB stream: a business key (the item's keys and version) instead of the event id. Any
 * string is a key (`customer#Zoë`, a composite key over 255 characters): idem maps it into its
 * stored keys (protocol.md K47).
 */
export const auditKey = (record: DynamoDBRecord): string => `${JSON.stringify(record.dynamodb?.Keys)}@${record.dynamodb?.SequenceNumber}`;

/** The audit handler over a store: one audit row per item version, however often the stream delivers it. */
export function auditHandlerOn(store: PostgresStore): DynamoDBStreamHandler {
  return dynamoDbBatch<Queryable, DynamoDBStreamEvent>({ store, scope: 'accounts-audit', getKey: auditKey }, async (record, ctx) => {
    await ctx.phase('audited', (tx) =>
      tx.query('INSERT INTO audit (event, item) VALUES ($1, $2)', [record.eventName, JSON.stringify(record.dynamodb?.NewImage)]),
    );
  });
}
export const auditHandler = auditHandlerOn(store);
// #endregion streams

// #region poison
/**
 * A DynamoDB stream whose records name their ledger entry: a record without one can never run,
 * so it goes to a table of its own and the shard goes on (protocol.md K47).
 */
export const ledgerHandler: DynamoDBStreamHandler = dynamoDbBatch<Queryable, DynamoDBStreamEvent>(
  {
    store,
    scope: 'ledger-stream',
    getKey: (record) => record.dynamodb?.NewImage?.entryId?.S ?? '', // '' is not a key
    onInvalidKey: async (record, error) => {
      await pool.query('INSERT INTO poison_records (record, reason) VALUES ($1, $2)', [JSON.stringify(record), error.message]);
    },
  },
  async (record, ctx) => {
    await ctx.phase('booked', (tx) => tx.query('INSERT INTO ledger (entry) VALUES ($1)', [JSON.stringify(record.dynamodb?.NewImage)]));
  },
);
// #endregion poison

// #region middy
/** The same SQS handler as a Middy middleware, after your other middlewares. */
export const ordersMiddy = middy<SQSEvent, SQSBatchResponse, Error, Context>().use(
  batchIdempotency(
    sqsBatch<Queryable, SQSEvent, Context>({ store, scope: 'orders-queue' }, async (record, ctx) => {
      await ctx.complete((tx) => tx.query('INSERT INTO orders_raw (message) VALUES ($1)', [record.body]));
    }),
  ),
);
// #endregion middy
