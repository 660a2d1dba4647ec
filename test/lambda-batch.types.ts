/**
 * Type-level tests (checked by `npm run typecheck`, never run): idem/lambda's batch handlers fit
 * `@types/aws-lambda`'s SQSHandler, KinesisStreamHandler and DynamoDBStreamHandler under
 * `--strict`, with the records typed by aws-lambda's own types when the event type is given, and
 * the Middy middleware on the real `@middy/core`.
 */
import middy from '@middy/core';
import type {
  Context,
  DynamoDBStreamEvent,
  DynamoDBStreamHandler,
  KinesisStreamEvent,
  KinesisStreamHandler,
  SQSBatchResponse,
  SQSEvent,
  SQSHandler,
} from 'aws-lambda';
import type { PostgresStore, Queryable } from '../src/postgres/index.js';
import { batchIdempotency, dynamoDbBatch, kinesisBatch, sqsBatch } from '../src/lambda/index.js';

declare const store: PostgresStore;

// Without type arguments: idem's slices of the records.
export const sqs: SQSHandler = sqsBatch<Queryable>({ store, scope: 'orders' }, async (record, ctx) => {
  const body: string = record.body;
  await ctx.complete((tx) => tx.query('INSERT INTO orders (body) VALUES ($1)', [body]));
});
export const kinesis: KinesisStreamHandler = kinesisBatch<Queryable>({ store, scope: 'stream' }, async (record, ctx) =>
  ctx.phase('seen', (tx) => tx.query('SELECT $1', [record.kinesis.data])),
);
export const dynamo: DynamoDBStreamHandler = dynamoDbBatch<Queryable>({ store, scope: 'table' }, async (record) => record.eventName);

// With aws-lambda's event and context types: the record and context are theirs.
export const typedSqs: SQSHandler = sqsBatch<Queryable, SQSEvent, Context>(
  { store, scope: 'orders', getKey: (record) => record.attributes.MessageDeduplicationId ?? record.messageId },
  async (record, _ctx, context) => `${record.receiptHandle} ${record.md5OfBody} ${context.functionName}`,
);
export const typedKinesis: KinesisStreamHandler = kinesisBatch<Queryable, KinesisStreamEvent, Context>({ store, scope: 's' }, async (record) => {
  const at: number = record.kinesis.approximateArrivalTimestamp;
  return at;
});
export const typedDynamo: DynamoDBStreamHandler = dynamoDbBatch<Queryable, DynamoDBStreamEvent, Context>({ store, scope: 't' }, async (record) => {
  const view: string | undefined = record.dynamodb?.StreamViewType;
  return view;
});

// Middy: the middleware answers SQSBatchResponse.
export const middySqs = middy<SQSEvent, SQSBatchResponse, Error, Context>().use(
  batchIdempotency(sqsBatch<Queryable, SQSEvent, Context>({ store, scope: 'orders' }, async () => undefined)),
);
