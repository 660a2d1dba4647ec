/**
 * idem/ai under the real AI SDK: `tool({ execute: idempotentExecute(…) })` driven by
 * `generateText` with the SDK's own MockLanguageModelV4 (ai/test), which emits the same write
 * tool call in turn after turn, each time with a new toolCallId, on every work store (memory,
 * PGlite, PostgreSQL, RedisStore + PostgresPhases). Effects are the store harness's rows,
 * written in the phases' transactions.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { generateText, tool } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';
import { z } from 'zod';
import { idempotentExecute, KeyInProgressError, KeyMismatchError } from '../src/ai/index.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { MemoryStore } from '../src/memory/index.js';
import { deferred } from './helpers/http.js';
import type { StoreHarness } from './helpers/stores.js';
import { useWorkStore, workStores } from './helpers/work-stores.js';

/** A model whose one step calls `toolName` with `input`, under a toolCallId of its own (as a new turn does). */
function modelCalling(toolName: string, input: Record<string, unknown>, toolCallId: string): MockLanguageModelV4 {
  return new MockLanguageModelV4({
    doGenerate: async () => ({
      content: [{ type: 'tool-call', toolCallId, toolName, input: JSON.stringify(input) }],
      finishReason: { unified: 'tool-calls', raw: undefined },
      usage: { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } },
      warnings: [],
    }),
  });
}

const refundInput = z.object({ requestId: z.string().optional(), orderId: z.string(), cents: z.number().int().positive() });

interface Refunds {
  runs: () => number;
  /** One conversation turn as `principal`: the model calls create_refund with `input`; the tool's output or error. */
  turn(input: Record<string, unknown>, opts?: { principal?: string; toolCallId?: string }): Promise<{ output?: unknown; error?: unknown; toolCallId: string }>;
}

let turns = 0;
function refunds(h: StoreHarness, options: { gate?: Promise<void>; entered?: () => void; keyArgument?: 'requestId' } = {}): Refunds {
  const engine = new IdempotencyEngine({ store: h.store });
  let runs = 0;
  // A tool per request, as an app builds it for the signed-in user.
  const toolFor = (principal: string) =>
    tool({
      description: 'Refunds part of an order',
      inputSchema: refundInput,
      execute: idempotentExecute(
        'create_refund',
        async (input: z.infer<typeof refundInput>, { toolCallId }, ctx) => {
          // Only the first run waits at the gate: a second run (a broken key) answers at once and fails the test.
          if (++runs === 1) {
            options.entered?.();
            await options.gate;
          }
          const refund = await ctx.phase('refund', h.effect(`refund ${input.orderId} ${input.cents}`));
          return { refundId: `re_${toolCallId}`, note: refund.note };
        },
        { engine, principal, keyFields: ['orderId', 'cents'], keyArgument: options.keyArgument },
      ),
    });
  return {
    runs: () => runs,
    async turn(input, opts = {}) {
      const toolCallId = opts.toolCallId ?? `call_${++turns}`;
      const result = await generateText({
        model: modelCalling('create_refund', input, toolCallId),
        tools: { create_refund: toolFor(opts.principal ?? 'user-alice') },
        prompt: 'Refund the order',
      });
      const part = result.content.find((p) => p.type === 'tool-result' || p.type === 'tool-error');
      assert.ok(part, 'the SDK ran the tool');
      return part.type === 'tool-result' ? { output: part.output, toolCallId } : { error: part.error, toolCallId };
    },
  };
}

for (const factory of workStores) {
  describe(`idem/ai with the AI SDK's generateText on ${factory.name}`, () => {
    const fresh = useWorkStore(factory);

    it('the same call re-emitted in three turns (new toolCallIds): one effect, the first output every time', async () => {
      const h = await fresh();
      const r = refunds(h);
      const first = await r.turn({ orderId: 'o-1', cents: 500 });
      assert.equal(first.error, undefined);
      const later = [await r.turn({ orderId: 'o-1', cents: 500 }), await r.turn({ orderId: 'o-1', cents: 500 })];
      assert.equal(r.runs(), 1);
      assert.deepEqual(await h.effects(), ['refund o-1 500']);
      for (const turn of later) {
        assert.notEqual(turn.toolCallId, first.toolCallId);
        assert.deepEqual(turn.output, first.output, 'the stored output, with the first turn’s refund id');
      }
      // Another intent (another amount) is another call.
      await r.turn({ orderId: 'o-1', cents: 700 });
      assert.equal(r.runs(), 2);
    });

    it('the same key with other arguments: a KeyMismatchError the model sees as the tool error; nothing runs', async () => {
      const h = await fresh();
      const r = refunds(h, { keyArgument: 'requestId' });
      const first = await r.turn({ requestId: 'req-1', orderId: 'o-2', cents: 500 });
      assert.equal(first.error, undefined);
      // The key field itself is not part of the fingerprint: the same request replays.
      assert.deepEqual((await r.turn({ requestId: 'req-1', orderId: 'o-2', cents: 500 })).output, first.output);
      const other = await r.turn({ requestId: 'req-1', orderId: 'o-2', cents: 900 });
      assert.ok(other.error instanceof KeyMismatchError, `a mismatch, got ${String(other.error)}`);
      assert.equal((other.error as KeyMismatchError).code, 'IDEM_KEY_MISMATCH');
      assert.equal(r.runs(), 1);
      assert.deepEqual(await h.effects(), ['refund o-2 500']);
    });

    it('two principals making the same call: two effects, neither replays the other’s output', async () => {
      const h = await fresh();
      const r = refunds(h);
      const alice = await r.turn({ orderId: 'o-3', cents: 500 }, { principal: 'user-alice' });
      const bob = await r.turn({ orderId: 'o-3', cents: 500 }, { principal: 'user-bob' });
      assert.equal(r.runs(), 2);
      assert.notDeepEqual(bob.output, alice.output);
      assert.deepEqual((await r.turn({ orderId: 'o-3', cents: 500 }, { principal: 'user-bob' })).output, bob.output);
      assert.deepEqual((await r.turn({ orderId: 'o-3', cents: 500 }, { principal: 'user-alice' })).output, alice.output);
      assert.equal(r.runs(), 2);
      assert.deepEqual(await h.effects(), ['refund o-3 500', 'refund o-3 500']);
    });

    it('5 concurrent duplicates: one effect; the others get KeyInProgressError, then the stored output', async () => {
      const h = await fresh();
      const gate = deferred<void>();
      const entered = deferred<void>();
      const r = refunds(h, { gate: gate.promise, entered: () => entered.resolve() });
      const first = r.turn({ orderId: 'o-4', cents: 500 });
      await entered.promise; // the first holds the key
      const others = await Promise.all(Array.from({ length: 4 }, () => r.turn({ orderId: 'o-4', cents: 500 })));
      for (const other of others) {
        assert.ok(other.error instanceof KeyInProgressError, `in progress, got ${String(other.error)}`);
        assert.ok((other.error as KeyInProgressError).retryAfterMs > 0);
      }
      gate.resolve();
      const done = await first;
      assert.equal(done.error, undefined);
      assert.deepEqual((await r.turn({ orderId: 'o-4', cents: 500 })).output, done.output);
      assert.equal(r.runs(), 1);
      assert.deepEqual(await h.effects(), ['refund o-4 500']);
    });
  });
}

describe('idem/ai options', () => {
  it('refuses a tool without a principal, so no app shares outputs across users by accident', () => {
    assert.throws(
      // @ts-expect-error principal is required
      () => idempotentExecute('t', async () => 1, { store: new MemoryStore() }),
      /needs a principal/,
    );
  });
});
