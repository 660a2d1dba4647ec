/**
 * Wait mode (protocol.md K17) for idem/function and idem/lambda batches on PostgreSQL with
 * `notify: true`: a call (a record) whose key another caller holds waits for the result and
 * returns it (acks it as a duplicate) instead of failing, once the holder finishes.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { PostgresStore } from '../src/postgres/index.js';
import { idempotent } from '../src/function/index.js';
import { type Disposition, sqsBatch } from '../src/lambda/index.js';
import { needs } from './helpers/services.js';
import { tableName } from './helpers/engines.js';
import { deferred, gatedWork } from './helpers/http.js';
import { sqsEvent } from './helpers/batch-events.js';
import { lambdaContext } from './helpers/harness-lambda.js';

describe('waiting for a held key (PostgreSQL, notify: true)', { skip: needs('DATABASE_URL') }, () => {
  async function open() {
    const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 6 });
    const table = tableName('idem_wait');
    const store = new PostgresStore({ client: pool, table, notify: true });
    await store.migrate();
    // Resolves once a waiter subscribed to the key: the holder is released only then.
    const subscribed = deferred<void>();
    const subscribe = store.subscribe!.bind(store);
    (store as { subscribe: typeof subscribe }).subscribe = async (scope: string, key: string) => {
      const changes = await subscribe(scope, key);
      subscribed.resolve();
      return changes;
    };
    const close = async () => {
      await pool.query(`DROP TABLE IF EXISTS "${table}"`).catch(() => undefined);
      await pool.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`).catch(() => undefined);
      await pool.end();
    };
    return { store, subscribed: subscribed.promise, close };
  }

  it('idempotent(fn, { waitMs }): the second call waits and returns the first call’s result', async () => {
    const { store, subscribed, close } = await open();
    try {
      const { gate, entered, runs, work } = gatedWork(() => ({ at: Math.random() }));
      const slow = idempotent(work, { store, name: 'slow', key: 'k', waitMs: 20_000 });
      const first = slow.outcome({});
      await entered.promise;
      const second = slow.outcome({});
      await subscribed;
      gate.resolve();
      const [a, b] = await Promise.all([first, second]);
      assert.equal(runs(), 1);
      assert.equal(b.replayed, true);
      assert.deepEqual(b.value, a.value);
    } finally {
      await close();
    }
  });

  it('sqsBatch: the same message in a second batch waits for the first and is acked as a duplicate', async () => {
    const { store, subscribed, close } = await open();
    try {
      const gate = deferred<void>();
      const entered = deferred<void>();
      const seen: string[] = [];
      let runs = 0;
      const handler = sqsBatch(
        { store, scope: 'orders', onRecord: (r, d: Disposition) => void seen.push(`${r.messageId} ${d.action}:${d.reason}`) },
        async () => {
          runs++;
          entered.resolve();
          await gate.promise;
        },
      );
      const first = handler(sqsEvent(1), lambdaContext());
      await entered.promise;
      const second = handler(sqsEvent(1), lambdaContext());
      await subscribed;
      gate.resolve();
      const [a, b] = await Promise.all([first, second]);
      assert.deepEqual([a.batchItemFailures, b.batchItemFailures], [[], []]);
      assert.equal(runs, 1);
      assert.deepEqual(seen.sort(), ['msg-1 ack:duplicate', 'msg-1 ack:processed']);
    } finally {
      await close();
    }
  });
});
