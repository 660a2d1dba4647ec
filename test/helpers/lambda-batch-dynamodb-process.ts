/**
 * A Lambda invocation in its own process (test/lambda-batch-dynamodb-chaos.test.ts): runs an SQS
 * batch of BATCH_SIZE records (ids `<BATCH_PREFIX>-<i>`) through idem/lambda's `sqsBatch` on a
 * `DynamoDbStore` (DynamoDB at BATCH_ENDPOINT, table BATCH_TABLE). Each record's effect is an
 * item written in the same `TransactWriteItems` as its recovery point (protocol.md K53 3).
 * Record BATCH_CRASH_AT commits its effect, prints CRASH_POINT and hangs there, so the test
 * kills the process between the effect and the record's finish. The invocation has
 * BATCH_REMAINING_MS left, which bounds each record's lease.
 */
import { randomUUID } from 'node:crypto';
import { DynamoDbStore } from '../../src/dynamodb/index.js';
import { sqsBatch } from '../../src/lambda/index.js';
import { sqsEvent } from './batch-events.js';
import { clientOn } from './dynamodb.js';
import { lambdaContext } from './harness-lambda.js';

const client = clientOn(Number(new URL(process.env.BATCH_ENDPOINT!).port));
const table = process.env.BATCH_TABLE!;
const store = new DynamoDbStore({ client, table, clockSkewMs: 0 });
const handler = sqsBatch({ store, scope: 'orders' }, async (record, ctx) => {
  await ctx.phase('effect', async (tx) => {
    tx.write({ Put: { TableName: tx.table, Item: { pk: { S: `effect#${randomUUID()}` }, sk: { S: 'effect' }, note: { S: record.messageId } } } });
    return record.messageId;
  });
  if (record.messageId === process.env.BATCH_CRASH_AT) {
    console.log('CRASH_POINT');
    await new Promise(() => undefined);
  }
});
const event = sqsEvent(Number(process.env.BATCH_SIZE ?? 5), { prefix: process.env.BATCH_PREFIX ?? 'msg' });
console.log(JSON.stringify(await handler(event, lambdaContext(Number(process.env.BATCH_REMAINING_MS)))));
client.destroy();
