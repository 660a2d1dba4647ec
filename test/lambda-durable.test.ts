/**
 * idem/lambda `withDurableIdempotency` on Lambda durable functions (protocol.md K54), run by the
 * durable SDK's own local runner (`@aws/durable-execution-sdk-js-testing`, its checkpoint
 * server, in real time), over the memory store, PostgresStore on PGlite and, with DATABASE_URL /
 * REDIS_URL, PostgreSQL and RedisStore + PostgresPhases. A replay of one execution (after a
 * wait, after its invocation died mid-way) resumes its own claim; another execution with the
 * key is a duplicate. Effects are the store harness's business rows, counted.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { type DurableContext, withDurableExecution } from '@aws/durable-execution-sdk-js';
import { LocalDurableTestRunner } from '@aws/durable-execution-sdk-js-testing';
import { withDurableIdempotency } from '../src/lambda/index.js';
import type { IdempotencyEvent } from '../src/engine/execution.js';
import { useWorkStore, workStores } from './helpers/work-stores.js';

interface Order {
  orderId: string;
  amount: number;
}

// Real time, not skipped: a wait or a retry delay that has not elapsed ends the invocation, so
// the runner replays the execution (with time skipped it may go on in the same invocation).
before(() => LocalDurableTestRunner.setupTestEnvironment({ skipTime: false }));
after(() => LocalDurableTestRunner.teardownTestEnvironment());

/** Runs one execution of `handler` with `payload` on its own runner. */
async function execute(handler: ReturnType<typeof withDurableExecution>, payload: Order) {
  const runner = new LocalDurableTestRunner({ handlerFunction: handler });
  const execution = await runner.run({ payload });
  return { status: execution.getStatus(), result: execution.getStatus() === 'SUCCEEDED' ? execution.getResult() : undefined, error: errorOf(execution) };
}

function errorOf(execution: {
  getStatus(): string | undefined;
  getError(): { errorType?: string | undefined; errorMessage?: string | undefined };
}): string | undefined {
  if (execution.getStatus() === 'SUCCEEDED') return undefined;
  const error = execution.getError();
  return `${error.errorType}: ${error.errorMessage}`;
}

for (const factory of workStores) {
  describe(`withDurableIdempotency over ${factory.name}`, () => {
    const fresh = useWorkStore(factory);

    it('a wait: the replay after context.wait resumes its own claim (not a 409), each phase once; a second execution replays the result', async () => {
      const h = await fresh();
      const entries: string[] = [];
      const handler = withDurableExecution(
        withDurableIdempotency<Order, { charged: string; amount: number }, unknown, DurableContext>(
          { store: h.store, name: 'orders', key: (order) => order.orderId },
          async (order, context, idem) => {
            entries.push(context.executionContext.durableExecutionArn);
            const reserved = await idem.phase('reserve', h.effect(`reserve ${order.orderId}`));
            await context.wait('cool-off', { seconds: 1 });
            const charged = await idem.phase('charge', h.effect(`charge ${order.orderId}`));
            return { charged: `${charged.note} after ${reserved.note}`, amount: order.amount };
          },
        ),
      );
      const first = await execute(handler, { orderId: 'o-1', amount: 5 });
      assert.equal(first.status, 'SUCCEEDED', first.error);
      assert.deepEqual(first.result, { charged: 'charge o-1 after reserve o-1', amount: 5 });
      // The handler ran again from its start after the wait, in the same execution.
      assert.equal(entries.length, 2);
      assert.equal(entries[0], entries[1]);
      assert.deepEqual(await h.effects(), ['reserve o-1', 'charge o-1']);
      // Another execution with the key: the stored result, the handler not run.
      const second = await execute(handler, { orderId: 'o-1', amount: 5 });
      assert.equal(second.status, 'SUCCEEDED', second.error);
      assert.deepEqual(second.result, first.result);
      assert.equal(entries.length, 2);
      assert.deepEqual(await h.effects(), ['reserve o-1', 'charge o-1']);
      // Another input with the key: a mismatch, nothing runs.
      const changed = await execute(handler, { orderId: 'o-1', amount: 6 });
      assert.equal(changed.status, 'FAILED');
      assert.match(changed.error ?? '', /KeyMismatchError|another/i);
      assert.equal(entries.length, 2);
    });

    it('a resume after a crash: the invocation that died after a committed phase is replayed, resumes its claim and skips the phase', async () => {
      const h = await fresh();
      const entries: string[] = [];
      let pushes = 0;
      const handler = withDurableExecution(
        withDurableIdempotency<Order, { sent: number }, unknown, DurableContext>(
          { store: h.store, name: 'orders', key: (order) => order.orderId },
          async (order, context, idem) => {
            entries.push(context.executionContext.durableExecutionArn);
            await idem.phase('reserve', h.effect(`reserve ${order.orderId}`));
            // A step whose first attempt dies: the SDK ends the invocation (nothing released, nothing
            // finished, as when the process dies) and replays the execution from its start.
            const sent = await context.step(
              'push',
              async () => {
                pushes++;
                if (pushes === 1) throw new Error('the invocation died mid-way');
                return pushes;
              },
              { retryStrategy: (_error, attempt) => ({ shouldRetry: attempt < 3, delay: { seconds: 1 } }) },
            );
            await idem.phase('charge', h.effect(`charge ${order.orderId}`));
            return { sent };
          },
        ),
      );
      const run = await execute(handler, { orderId: 'o-2', amount: 1 });
      assert.equal(run.status, 'SUCCEEDED', run.error);
      assert.deepEqual(run.result, { sent: 2 });
      assert.ok(entries.length >= 2, `the execution was replayed (${entries.length} entries)`);
      assert.equal(new Set(entries).size, 1);
      assert.deepEqual(await h.effects(), ['reserve o-2', 'charge o-2']);
    });

    it('two concurrent executions of one key: one effect; the duplicate throws KeyInProgressError, or with inProgressWaits waits and returns the result', async () => {
      const h = await fresh();
      let runs = 0;
      let entered!: () => void;
      const inside = new Promise<void>((resolve) => {
        entered = resolve;
      });
      let open!: () => void;
      const gate = new Promise<void>((resolve) => {
        open = resolve;
      });
      let waitingSeen!: () => void;
      const waiting = new Promise<void>((resolve) => {
        waitingSeen = resolve;
      });
      // The first in-progress answer is the refused duplicate's, the second the waiter's.
      let inProgress = 0;
      const onEvent = (event: IdempotencyEvent) => {
        if (event.type === 'in-progress' && ++inProgress === 2) waitingSeen();
      };
      const make = (inProgressWaits: number) =>
        withDurableExecution(
          withDurableIdempotency<Order, { charged: string }, unknown, DurableContext>(
            { store: h.store, name: 'orders', key: (order) => order.orderId, inProgressWaits, maxInProgressWaitSeconds: 1, onEvent },
            async (order, _context, idem) => {
              runs++;
              const charged = await idem.phase('charge', h.effect(`charge ${order.orderId}`));
              // Held after the commit, outside any transaction (PGlite has one connection).
              entered();
              await gate;
              return { charged: charged.note };
            },
          ),
        );
      const first = execute(make(0), { orderId: 'o-3', amount: 1 });
      await inside;
      // A duplicate while the first holds the key: no wait, so KeyInProgressError.
      const refused = await execute(make(0), { orderId: 'o-3', amount: 1 });
      assert.equal(refused.status, 'FAILED');
      assert.match(refused.error ?? '', /KeyInProgressError|in progress/i);
      // A duplicate that waits: it sees the key in progress, then the first finishes.
      const waiter = execute(make(100), { orderId: 'o-3', amount: 1 });
      await waiting;
      open();
      const [a, b] = await Promise.all([first, waiter]);
      assert.equal(a.status, 'SUCCEEDED', a.error);
      assert.equal(b.status, 'SUCCEEDED', b.error);
      assert.deepEqual(b.result, a.result);
      assert.equal(runs, 1);
      assert.deepEqual(await h.effects(), ['charge o-3']);
    });
  });
}
