/**
 * A Lambda invocation in its own process (test/lambda-batch-crash.test.ts): runs an SQS batch
 * of 5 records through idem/lambda's `sqsBatch` on PostgreSQL (BATCH_DB_URL, table BATCH_TABLE,
 * effects in BATCH_TABLE_side). Record BATCH_CRASH_AT commits its effect, prints CRASH_POINT and
 * hangs there, so the test can kill the process between the effect and the record's finish.
 * The invocation has BATCH_REMAINING_MS left, which bounds each record's lease.
 */
import pg from 'pg';
import { PostgresStore } from '../../src/postgres/index.js';
import { sqsBatch } from '../../src/lambda/index.js';
import { sqsEvent } from './batch-events.js';
import { lambdaContext } from './harness-lambda.js';

const pool = new pg.Pool({ connectionString: process.env.BATCH_DB_URL, max: 2 });
const table = process.env.BATCH_TABLE!;
const store = new PostgresStore({ client: pool, table });
const handler = sqsBatch<pg.PoolClient>({ store, scope: 'orders' }, async (record, ctx) => {
  await ctx.phase('effect', (tx) => tx.query(`INSERT INTO "${table}_side" (note) VALUES ($1)`, [record.messageId]).then(() => record.messageId));
  if (record.messageId === process.env.BATCH_CRASH_AT) {
    console.log('CRASH_POINT');
    await new Promise(() => undefined);
  }
});
console.log(JSON.stringify(await handler(sqsEvent(5), lambdaContext(Number(process.env.BATCH_REMAINING_MS)))));
await pool.end();
