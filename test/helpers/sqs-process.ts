/**
 * An SQS consumer in its own process, for the crash test of test/sqs.test.ts: long-polls one
 * queue of the parent's in-process emulator through idem on PostgreSQL, runs an `invoice`
 * phase, prints `PHASE <key>` and then hangs, so the parent can SIGKILL it mid-message.
 * Prints `READY` once polling. Usage: tsx sqs-process.ts <endpoint> <queue url> <table> <scope> (DATABASE_URL set).
 */
import pg from 'pg';
import { SQSClient } from '@aws-sdk/client-sqs';
import { IdempotentConsumer, type MessageContext } from '../../src/consumer/index.js';
import { PostgresStore } from '../../src/postgres/index.js';
import type { Queryable } from '../../src/postgres/client.js';
import { SqsConsumer } from '../../src/sqs/index.js';

const [endpoint, queueUrl, table, scope] = process.argv.slice(2) as [string, string, string, string];
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
const store = new PostgresStore({ client: pool, table });
const consumer = new IdempotentConsumer<Queryable>({ store, scope, retryDelayMs: 0 });
const client = new SQSClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });
const handler = async (ctx: MessageContext<Queryable>) => {
  await ctx.phase('invoice', (tx) => tx.query(`INSERT INTO ${table}_effects (message_id, note) VALUES ($1, 'invoice')`, [ctx.key]));
  process.stdout.write(`PHASE ${ctx.key}\n`);
  await new Promise(() => {}); // hang until killed
};
// Visibility 2 s: the lease is 1.33 s (two thirds), so the redelivery finds it run out.
new SqsConsumer({ client, queueUrl, consumer, handler, visibilityTimeoutSec: 2, waitTimeSeconds: 1, concurrency: 1 }).start();
process.stdout.write('READY\n');
