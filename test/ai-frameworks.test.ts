/**
 * idem/ai's one `idempotentExecute` under OpenAI Agents JS's `tool({ execute })` and LangChain
 * JS's `tool(fn, { schema })`: a scripted run invokes the real tool twice with one intent (as the
 * frameworks' runners do, through the tool's own `invoke`), on every work store.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { RunContext, tool as agentsTool } from '@openai/agents';
import { tool as langchainTool } from '@langchain/core/tools';
import type { RunnableConfig } from '@langchain/core/runnables';
import { z } from 'zod';
import { idempotentExecute, KeyMismatchError } from '../src/ai/index.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { useWorkStore, workStores } from './helpers/work-stores.js';

const refundInput = z.object({ requestId: z.string(), orderId: z.string(), cents: z.number().int().positive() });
type RefundInput = z.infer<typeof refundInput>;

for (const factory of workStores) {
  describe(`idem/ai under OpenAI Agents JS and LangChain JS on ${factory.name}`, () => {
    const fresh = useWorkStore(factory);

    it('OpenAI Agents JS: the same call invoked twice runs once; another user runs their own; another input under the key is refused', async () => {
      const h = await fresh();
      const engine = new IdempotencyEngine({ store: h.store });
      let runs = 0;
      const createRefund = agentsTool({
        name: 'create_refund',
        description: 'Refunds part of an order',
        parameters: refundInput,
        // What the model reads of a thrown error (the SDK's default hides the message).
        errorFunction: (_context, error) => (error instanceof KeyMismatchError ? `${error.code}: ${error.message}` : `failed: ${String(error)}`),
        execute: idempotentExecute<RefundInput, string, RunContext<{ userId: string }> | undefined>(
          'create_refund',
          async (input, _runContext, ctx) => {
            runs++;
            const refund = await ctx.phase('refund', h.effect(`refund ${input.orderId} ${input.cents}`));
            return `refunded ${refund.note} #${runs}`;
          },
          { engine, principal: (_input, runContext) => runContext?.context.userId, keyArgument: 'requestId' },
        ),
      });
      const alice = new RunContext({ userId: 'alice' });
      const call = (ctx: RunContext<{ userId: string }>, input: RefundInput, callId: string) =>
        createRefund.invoke(ctx, JSON.stringify(input), {
          toolCall: { type: 'function_call', callId, name: 'create_refund', arguments: JSON.stringify(input) },
        });
      const first = await call(alice, { requestId: 'r-1', orderId: 'o-1', cents: 500 }, 'call_1');
      const again = await call(alice, { requestId: 'r-1', orderId: 'o-1', cents: 500 }, 'call_2');
      assert.equal(first, 'refunded refund o-1 500 #1');
      assert.equal(again, first);
      const bob = await call(new RunContext({ userId: 'bob' }), { requestId: 'r-1', orderId: 'o-1', cents: 500 }, 'call_3');
      assert.equal(bob, 'refunded refund o-1 500 #2');
      // The Agents SDK turns a thrown error into the tool's output for the model.
      const other = await call(alice, { requestId: 'r-1', orderId: 'o-1', cents: 900 }, 'call_4');
      assert.match(String(other), /^IDEM_KEY_MISMATCH: .*used with other arguments/);
      assert.equal(runs, 2);
      assert.deepEqual(await h.effects(), ['refund o-1 500', 'refund o-1 500']);
    });

    it('LangChain JS: the same call invoked twice in one thread runs once; another thread runs its own; another input is a KeyMismatchError', async () => {
      const h = await fresh();
      const engine = new IdempotencyEngine({ store: h.store });
      let runs = 0;
      const createRefund = langchainTool(
        idempotentExecute<RefundInput, { note: string; run: number }, RunnableConfig | undefined>(
          'create_refund',
          async (input, _config, ctx) => {
            runs++;
            const refund = await ctx.phase('refund', h.effect(`refund ${input.orderId} ${input.cents}`));
            return { note: refund.note, run: runs };
          },
          { engine, principal: (_input, config) => config?.configurable?.thread_id as string | undefined, keyFields: ['orderId', 'cents'] },
        ),
        { name: 'create_refund', description: 'Refunds part of an order', schema: refundInput },
      );
      const thread = (id: string) => ({ configurable: { thread_id: id } });
      const first = await createRefund.invoke({ requestId: 'a', orderId: 'o-2', cents: 500 }, thread('t-1'));
      const again = await createRefund.invoke({ requestId: 'a', orderId: 'o-2', cents: 500 }, thread('t-1'));
      assert.deepEqual(first, { note: 'refund o-2 500', run: 1 });
      assert.deepEqual(again, first);
      assert.deepEqual(await createRefund.invoke({ requestId: 'a', orderId: 'o-2', cents: 500 }, thread('t-2')), { note: 'refund o-2 500', run: 2 });
      // Same key fields, another request id: the fingerprint differs.
      await assert.rejects(createRefund.invoke({ requestId: 'b', orderId: 'o-2', cents: 500 }, thread('t-1')), KeyMismatchError);
      assert.equal(runs, 2);
      assert.deepEqual(await h.effects(), ['refund o-2 500', 'refund o-2 500']);
    });
  });
}
