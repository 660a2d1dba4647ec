/**
 * idem/lambda's batch handlers (SQS standard and FIFO, Kinesis, DynamoDB streams) on the AWS
 * documentation's example events (test/fixtures/lambda/), over the store entries the HTTP Lambda
 * handler's contract runs on (test/helpers/work-stores.ts). Effects are the store harness's
 * business rows, committed in the record's phase and counted. The crash mid-batch (a real
 * process killed) is in test/lambda-batch-crash.test.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import middy from '@middy/core';
import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { batchIdempotency, type Disposition, dynamoDbBatch, kinesisBatch, sqsBatch } from '../src/lambda/index.js';
import type { StoreHarness } from './helpers/stores.js';
import { workStores, useWorkStore } from './helpers/work-stores.js';
import { dynamoDbEvent, kinesisEvent, sqsEvent } from './helpers/batch-events.js';
import { lambdaContext } from './helpers/harness-lambda.js';
import { deferred } from './helpers/http.js';
import { sleep } from './helpers/wait.js';

const ids = (response: { batchItemFailures: Array<{ itemIdentifier: string }> }) => response.batchItemFailures.map((f) => f.itemIdentifier);

/** A record handler that commits one effect per record and throws once for the ids in `failOnce`. */
function worker(h: StoreHarness, failOnce: string[] = []) {
  const runs: string[] = [];
  const failing = new Set(failOnce);
  return {
    runs,
    handle: async (id: string, ctx: { phase<T>(name: string, fn: (tx: unknown) => Promise<T>): Promise<T> }) => {
      runs.push(id);
      if (failing.delete(id)) throw new Error(`record ${id} failed`);
      await ctx.phase('effect', h.effect(id));
    },
  };
}

for (const factory of workStores) {
  describe(`Lambda batches over ${factory.name}`, () => {
    const fresh = useWorkStore(factory);

    it('SQS: record 3 of 5 fails → batchItemFailures names it alone; the redelivered batch reruns only record 3', async () => {
      const h = await fresh();
      const w = worker(h, ['msg-3']);
      const handler = sqsBatch({ store: h.store, scope: 'orders' }, (record, ctx) => w.handle(record.messageId, ctx));
      const event = sqsEvent(5);
      assert.deepEqual(ids(await handler(event, lambdaContext())), ['msg-3']);
      assert.deepEqual(w.runs, ['msg-1', 'msg-2', 'msg-3', 'msg-4', 'msg-5']);
      // Lambda redelivers the failed record; the whole batch again (a crashed invocation) skips the done ones too.
      assert.deepEqual(ids(await handler(sqsEvent(5, { receiveCount: 2 }), lambdaContext())), []);
      assert.deepEqual(w.runs.slice(5), ['msg-3']);
      assert.deepEqual((await h.effects()).sort(), ['msg-1', 'msg-2', 'msg-3', 'msg-4', 'msg-5']);
    });

    it('SQS FIFO: a failed record stops the rest of its message group; other groups go on', async () => {
      const h = await fresh();
      const w = worker(h, ['msg-2']);
      const handler = sqsBatch({ store: h.store, scope: 'orders.fifo' }, (record, ctx) => w.handle(record.messageId, ctx));
      const groups = ['A', 'A', 'B', 'A', 'B'];
      assert.deepEqual(ids(await handler(sqsEvent(5, { groups }), lambdaContext())), ['msg-2', 'msg-4']);
      assert.deepEqual(w.runs, ['msg-1', 'msg-2', 'msg-3', 'msg-5']);
      const again = { Records: sqsEvent(5, { groups, receiveCount: 2 }).Records.filter((r) => ['msg-2', 'msg-4'].includes(r.messageId)) };
      assert.deepEqual(ids(await handler(again, lambdaContext())), []);
      assert.deepEqual(w.runs.slice(4), ['msg-2', 'msg-4']);
      assert.deepEqual(await h.effects(), ['msg-1', 'msg-3', 'msg-5', 'msg-2', 'msg-4']);
    });

    it('Kinesis: record 3 of 5 fails → it and the records after it are reported by sequence number; the retry from it runs 3, 4, 5 once', async () => {
      const h = await fresh();
      const w = worker(h, ['seq0003']);
      const handler = kinesisBatch({ store: h.store, scope: 'lambda-stream' }, (record, ctx) => w.handle(record.kinesis.sequenceNumber, ctx));
      assert.deepEqual(ids(await handler(kinesisEvent(5), lambdaContext())), ['seq0003', 'seq0004', 'seq0005']);
      assert.deepEqual(w.runs, ['seq0001', 'seq0002', 'seq0003']);
      // Lambda retries from the lowest reported sequence number; the whole batch again skips 1 and 2.
      assert.deepEqual(ids(await handler(kinesisEvent(5), lambdaContext())), []);
      assert.deepEqual(w.runs.slice(3), ['seq0003', 'seq0004', 'seq0005']);
      assert.deepEqual(await h.effects(), ['seq0001', 'seq0002', 'seq0003', 'seq0004', 'seq0005']);
    });

    it('DynamoDB streams: the event id is the key; record 2 of 3 fails and the retry runs 2 and 3 once', async () => {
      const h = await fresh();
      const w = worker(h, ['ev-2']);
      const handler = dynamoDbBatch({ store: h.store, scope: 'TestTable' }, (record, ctx) => w.handle(record.eventID!, ctx));
      assert.deepEqual(ids(await handler(dynamoDbEvent(3), lambdaContext())), ['222', '333']);
      assert.deepEqual(ids(await handler(dynamoDbEvent(3), lambdaContext())), []);
      assert.deepEqual(w.runs, ['ev-1', 'ev-2', 'ev-2', 'ev-3']);
      assert.deepEqual(await h.effects(), ['ev-1', 'ev-2', 'ev-3']);
    });

    it('the same message in two batches at once runs once: the second batch reports it while the first holds it, and its redelivery is a duplicate', async () => {
      const h = await fresh();
      const entered = deferred<void>();
      const gate = deferred<void>();
      const runs: string[] = [];
      const seen: Array<[string, Disposition['action'], string]> = [];
      const handler = sqsBatch(
        { store: h.store, scope: 'orders', onRecord: (r, d) => void seen.push([r.messageId, d.action, d.reason]) },
        async (record, ctx) => {
          runs.push(record.messageId);
          if (record.messageId === 'msg-2') {
            entered.resolve();
            await gate.promise;
          }
          await ctx.phase('effect', h.effect(record.messageId));
        },
      );
      const all = sqsEvent(3).Records;
      const first = handler({ Records: [all[0]!, all[1]!] }, lambdaContext());
      await entered.promise;
      // The second invocation has too little time left to wait for the holder: msg-2 goes back to SQS.
      const second = await handler({ Records: [all[1]!, all[2]!] }, lambdaContext(500));
      assert.deepEqual(ids(second), ['msg-2']);
      gate.resolve();
      assert.deepEqual(ids(await first), []);
      assert.deepEqual(ids(await handler({ Records: [all[1]!] }, lambdaContext())), []);
      assert.deepEqual(runs.sort(), ['msg-1', 'msg-2', 'msg-3']);
      assert.deepEqual((await h.effects()).sort(), ['msg-1', 'msg-2', 'msg-3']);
      assert.deepEqual(
        seen.filter(([id]) => id === 'msg-2').map(([, action, reason]) => `${action}:${reason}`),
        ['retry:in-progress', 'ack:processed', 'ack:duplicate'],
      );
    });

    it('each record’s lease is the invocation’s remaining time plus the margin, taken when the record starts', async () => {
      const h = await fresh();
      const leases: number[] = [];
      const handler = sqsBatch({ store: h.store, scope: 'orders', leaseMarginMs: 500 }, async (record, ctx) => {
        const row = await h.store.get('orders', record.messageId, 86_400_000);
        leases.push(row!.leaseRemainingMs);
        await ctx.phase('effect', h.effect(record.messageId));
      });
      await handler(sqsEvent(1), lambdaContext(20_000));
      assert.ok(leases[0]! > 15_000 && leases[0]! <= 20_500, `lease ${leases[0]} ms`);
      await handler(sqsEvent(1, { prefix: 'short' }), lambdaContext(3_000));
      assert.ok(leases[1]! > 1_000 && leases[1]! <= 3_500, `lease ${leases[1]} ms`);
    });

    it('a record started near the timeout runs under the handler’s one engine with the shorter lease (K26); one with no time left goes back unclaimed', async () => {
      const h = await fresh();
      // A duplicate may wait 5 s where the store can wake it: longer than this invocation has
      // left, which an engine per record refused (its lease shorter than the wait).
      const wait = typeof h.store.subscribe === 'function' ? { inProgress: { wait: 5_000 } } : {};
      const leases: number[] = [];
      const w = worker(h);
      const handler = sqsBatch({ store: h.store, scope: 'orders', leaseMarginMs: 500, ...wait }, async (record, ctx) => {
        leases.push((await h.store.get('orders', record.messageId, 86_400_000))!.leaseRemainingMs);
        await w.handle(record.messageId, ctx);
      });
      assert.deepEqual(ids(await handler(sqsEvent(2), lambdaContext(1_500))), []);
      assert.ok(
        leases.every((ms) => ms > 0 && ms <= 2_000),
        `leases ${leases} ms`,
      );
      assert.deepEqual((await h.effects()).sort(), ['msg-1', 'msg-2']);
      // No time left: the record is named and never claimed, so its redelivery runs it once.
      assert.deepEqual(ids(await handler(sqsEvent(1, { prefix: 'late' }), lambdaContext(0))), ['late-1']);
      assert.equal(await h.store.get('orders', 'late-1', 86_400_000), undefined);
      assert.deepEqual(ids(await handler(sqsEvent(1, { prefix: 'late', receiveCount: 2 }), lambdaContext())), []);
      assert.deepEqual(w.runs, ['msg-1', 'msg-2', 'late-1']);
    });

    it('Kinesis (no delivery count): a record whose invocation hangs past its lease every time runs maxAttempts times, then is named without running (K23 by the key’s takeovers)', async () => {
      const h = await fresh();
      let runs = 0;
      let entered = deferred<void>();
      const seen: string[] = [];
      const handler = kinesisBatch(
        { store: h.store, scope: 'crash-stream', leaseMarginMs: 0, maxAttempts: 3, onRecord: (_r, d) => void seen.push(`${d.action}:${d.reason}`) },
        async () => {
          runs++;
          entered.resolve();
          await new Promise(() => undefined); // hangs until Lambda would end the invocation
        },
      );
      const event = kinesisEvent(1, 'crash');
      // Each invocation has 200 ms: its record's lease ends with it, and the next delivery takes over.
      for (let deliveries = 0; !seen.includes('dead-letter:max-attempts'); deliveries++) {
        assert.ok(runs <= 6 && deliveries < 200, `the record ran ${runs} times and was never given up (${seen.join(', ')})`);
        entered = deferred<void>();
        const invocation = handler(event, lambdaContext(200));
        const outcome = await Promise.race([invocation, entered.promise.then(() => 'hung' as const)]);
        if (outcome === 'hung') continue;
        assert.deepEqual(ids(outcome), ['crash0001']);
        const last = seen.at(-1);
        if (last === 'retry:in-progress') await sleep(20); // the hung invocation's lease has not ended yet
      }
      assert.equal(runs, 3);
      // Redelivered again: still named, still not run.
      seen.length = 0;
      let again: Awaited<ReturnType<typeof handler>>;
      do {
        again = await handler(event, lambdaContext(200));
        if (seen.at(-1) === 'retry:in-progress') await sleep(20);
      } while (seen.at(-1) === 'retry:in-progress');
      assert.deepEqual(ids(again), ['crash0001']);
      assert.equal(seen.at(-1), 'dead-letter:max-attempts');
      assert.equal(runs, 3);
    });

    it('DynamoDB streams (no delivery count): a record that throws every time runs maxAttempts times (every store counts failures)', async () => {
      const h = await fresh();
      let runs = 0;
      const seen: string[] = [];
      const handler = dynamoDbBatch(
        { store: h.store, scope: 'throw-stream', maxAttempts: 3, onRecord: (_r, d) => void seen.push(`${d.action}:${d.reason}`) },
        async () => {
          runs++;
          throw new Error('a bug in the handler');
        },
      );
      for (let i = 0; i < 5; i++) assert.deepEqual(ids(await handler(dynamoDbEvent(1, 'bad'), lambdaContext())), ['111']);
      assert.equal(runs, 3);
      assert.deepEqual(seen, [
        'retry:handler-failed',
        'retry:handler-failed',
        'dead-letter:max-attempts',
        'dead-letter:max-attempts',
        'dead-letter:max-attempts',
      ]);
    });

    it('a malformed record fails alone: it is named, the records before it commit, the batch never throws', async () => {
      const h = await fresh();
      const w = worker(h);
      const kinesis = kinesisBatch({ store: h.store, scope: 'lambda-stream' }, (record, ctx) => w.handle(record.kinesis.sequenceNumber, ctx));
      const stream = kinesisEvent(3);
      (stream.Records[1]!.kinesis as { data: unknown }).data = 42; // not base64 text
      assert.deepEqual(ids(await kinesis(stream, lambdaContext())), ['seq0002', 'seq0003']);
      const table = dynamoDbBatch({ store: h.store, scope: 'TestTable' }, (record, ctx) => w.handle(record.eventID!, ctx));
      const images = dynamoDbEvent(3);
      images.Records[1]!.dynamodb!.NewImage = { Id: 2n } as never; // an unmarshalled image JSON cannot write
      assert.deepEqual(ids(await table(images, lambdaContext())), ['222', '333']);
      const queue = sqsBatch({ store: h.store, scope: 'orders' }, (record, ctx) => w.handle(record.messageId, ctx));
      const messages = sqsEvent(3);
      (messages.Records as unknown[])[1] = null;
      assert.deepEqual(ids(await queue(messages, lambdaContext())), ['']); // no id to name: Lambda retries the batch
      assert.deepEqual(w.runs, ['seq0001', 'ev-1', 'msg-1', 'msg-3']);
      await assert.rejects(queue({ Records: {} } as never, lambdaContext()), { name: 'InvalidEventError', code: 'IDEM_INVALID_EVENT' });
    });

    it('getKey: a business id in the body is the key, so the same order sent twice as two messages runs once', async () => {
      const h = await fresh();
      const w = worker(h);
      const handler = sqsBatch({ store: h.store, scope: 'orders', getKey: (record) => `order-${JSON.parse(record.body).order}` }, (record, ctx) =>
        w.handle(record.messageId, ctx),
      );
      const a = sqsEvent(2, { prefix: 'a' });
      const b = sqsEvent(2, { prefix: 'b' });
      assert.deepEqual(ids(await handler(a, lambdaContext())), []);
      assert.deepEqual(ids(await handler(b, lambdaContext())), []);
      assert.deepEqual(w.runs, ['a-1', 'a-2']);
    });

    it('Middy: middy().use(batchIdempotency(sqsBatch(…))) answers the partial batch response', async () => {
      const h = await fresh();
      const w = worker(h, ['msg-2']);
      const handler = middy<SQSEvent, SQSBatchResponse>().use(
        batchIdempotency(sqsBatch({ store: h.store, scope: 'orders' }, (record, ctx) => w.handle(record.messageId, ctx))),
      );
      assert.deepEqual(ids(await handler(sqsEvent(3), lambdaContext() as never)), ['msg-2']);
      assert.deepEqual(ids(await handler(sqsEvent(3), lambdaContext() as never)), []);
      assert.deepEqual(w.runs, ['msg-1', 'msg-2', 'msg-3', 'msg-2']);
    });
  });
}
