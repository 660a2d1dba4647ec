/**
 * A Lambda invocation killed mid-batch (a real process, SIGKILL after record 3 committed its
 * effect and before its key finished), then the batch redelivered as SQS does: the redeliveries
 * finish the batch with every effect exactly once — records 1-2 replayed, record 3 taken over
 * once its lease (the dead invocation's remaining time) ran out and resumed after its phase,
 * records 4-5 run. Needs PostgreSQL (two processes share the store).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { PostgresStore } from '../src/postgres/index.js';
import { sqsBatch } from '../src/lambda/index.js';
import { needs } from './helpers/services.js';
import { tableName } from './helpers/engines.js';
import { spawnTs } from './helpers/process.js';
import { poll } from './helpers/wait.js';
import { sqsEvent } from './helpers/batch-events.js';
import { lambdaContext } from './helpers/harness-lambda.js';

describe('Lambda batch: a crash mid-batch', { skip: needs('DATABASE_URL') }, () => {
  it('the redelivered batch finishes with 0 duplicate effects', async () => {
    const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
    const table = tableName('idem_batch');
    const store = new PostgresStore({ client: pool, table });
    try {
      await store.migrate();
      await pool.query(`CREATE TABLE "${table}_side" (id serial PRIMARY KEY, note text NOT NULL)`);
      const child = spawnTs('test/helpers/lambda-batch-process.ts', {
        BATCH_DB_URL: process.env.DATABASE_URL!,
        BATCH_TABLE: table,
        BATCH_CRASH_AT: 'msg-3',
        BATCH_REMAINING_MS: '1500',
      });
      await child.waitFor(/CRASH_POINT/);
      await child.kill('SIGKILL');
      const notes = async () => (await pool.query(`SELECT note FROM "${table}_side" ORDER BY id`)).rows.map((r) => String(r.note));
      assert.deepEqual(await notes(), ['msg-1', 'msg-2', 'msg-3']);

      const runs: string[] = [];
      const handler = sqsBatch<pg.PoolClient>({ store, scope: 'orders' }, async (record, ctx) => {
        runs.push(`${record.messageId}${ctx.resumed ? ' resumed' : ''}`);
        await ctx.phase('effect', (tx) => tx.query(`INSERT INTO "${table}_side" (note) VALUES ($1)`, [record.messageId]).then(() => record.messageId));
      });
      // SQS redelivers the batch (the invocation returned nothing); record 3 stays held until the
      // dead invocation's lease ends, and comes back each time until then.
      let delivery = 1;
      await poll(
        async () => {
          const response = await handler(sqsEvent(5, { receiveCount: ++delivery }), lambdaContext());
          return response.batchItemFailures.length === 0 || undefined;
        },
        30_000,
        'the redelivered batch to finish',
        200,
      );
      assert.deepEqual((await notes()).sort(), ['msg-1', 'msg-2', 'msg-3', 'msg-4', 'msg-5']);
      assert.deepEqual(runs, ['msg-4', 'msg-5', 'msg-3 resumed']);
    } finally {
      await pool.query(`DROP TABLE IF EXISTS "${table}_side"`).catch(() => undefined);
      await pool.query(`DROP TABLE IF EXISTS "${table}"`).catch(() => undefined);
      await pool.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`).catch(() => undefined);
      await pool.end();
    }
  });
});
