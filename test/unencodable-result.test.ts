/**
 * A result idem cannot encode fails closed (protocol.md K36, K46): the work ran and its effects
 * stand, so the key is not freed for a rerun. `idempotent(fn)` returning a BigInt (not JSON)
 * runs once however often it is called; every call throws the stored failure
 * `IDEM_UNENCODABLE_RESULT`. The engine's own attempt does the same for a response it cannot
 * store. On memory, PostgreSQL and Redis (when their URLs are set).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ErrorCode, UnencodableResultError } from '../src/core/errors.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { idempotent, StoredFailureError } from '../src/function/index.js';
import type { StoredResponse } from '../src/store/types.js';
import { storeFactories, useStoreBackend } from './helpers/stores.js';

const kinds = new Set(['memory', 'PostgresStore on PostgreSQL', 'RedisStore on Redis']);

for (const factory of storeFactories.filter((f) => kinds.has(f.name))) {
  describe(`a result idem cannot encode: ${factory.name}`, () => {
    const { backend, cleanup } = useStoreBackend(factory);
    const engineOf = async () => {
      const harness = await backend().fresh();
      cleanup(() => harness.drop());
      return new IdempotencyEngine<unknown>({ store: harness.store, leaseMs: 60_000, heartbeatMs: 0 });
    };

    it('idempotent(fn) returning a BigInt: 3 calls, 1 effect, and every call throws IDEM_UNENCODABLE_RESULT', async () => {
      const engine = await engineOf();
      let effects = 0;
      const charge = idempotent(
        async (_ctx, _order: { id: string }) => {
          effects++; // the effect: a charge sent
          return { amount: 100n };
        },
        { engine, name: 'charge', key: (order) => order.id },
      );
      const errors: unknown[] = [];
      for (let i = 0; i < 3; i++)
        errors.push(
          await charge({ id: 'order-1' }).then(
            () => assert.fail('a result that cannot be stored is not returned'),
            (e: unknown) => e,
          ),
        );
      assert.equal(effects, 1, 'the function ran once: the key was not freed for a rerun');
      for (const error of errors) {
        assert.ok(error instanceof StoredFailureError, `a StoredFailureError: ${String(error)}`);
        assert.equal(error.failure.code, ErrorCode.UnencodableResult);
      }
      assert.ok((errors[0] as Error).cause instanceof UnencodableResultError, 'the first call has the encoder refusal as its cause');
      // the stored failure is the key's outcome, replayed
      const outcome = await charge.outcome({}, { id: 'order-1' }).catch((e: unknown) => e);
      assert.ok(outcome instanceof StoredFailureError);
      assert.equal(effects, 1);
    });

    it('the engine: a response it cannot store ends the attempt for good, not as the store unavailable', async () => {
      const engine = await engineOf();
      let runs = 0;
      const input = { scope: 'jobs', key: 'job-1', fingerprint: new Uint8Array(32) };
      const policy = { maxAttempts: 5 };
      const bad = { status: 200, headers: [], body: 'not bytes' } as unknown as StoredResponse;
      const first = await engine.run(input, policy, async () => {
        runs++;
        return bad;
      });
      assert.equal(first.kind, 'failed-permanently', `ended for good: ${first.kind}`);
      assert.ok(first.kind === 'failed-permanently' && first.error instanceof UnencodableResultError);
      assert.equal(runs, 1);
    });
  });
}
