/**
 * IdempotencyEngine options, checked in its constructor: no store needed.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { IdempotencyEngine, type EngineOptions } from '../src/engine/engine.js';
import type { IdempotencyStore } from '../src/store/types.js';
import { InvalidOptionError } from '../src/core/errors.js';

describe('IdempotencyEngine options', () => {
  // Option checks happen in the constructor; this store is never called.
  const store = {
    claim: async () => {
      throw new Error('not used');
    },
  } as unknown as IdempotencyStore;

  it('requires a store', () => {
    assert.throws(() => new IdempotencyEngine(undefined as never), InvalidOptionError);
    assert.throws(() => new IdempotencyEngine({} as never), InvalidOptionError);
    assert.throws(() => new IdempotencyEngine({ store: {} as never }), InvalidOptionError);
  });

  it('rejects out-of-range durations', () => {
    const bad: Array<Partial<EngineOptions>> = [
      { leaseMs: 0 },
      { leaseMs: -1 },
      { leaseMs: Number.NaN },
      { leaseMs: Number.POSITIVE_INFINITY },
      { retentionMs: 0 },
      { leaseMs: 1000, retentionMs: 1000 },
      { leaseMs: 1000, retentionMs: 999 },
      { leaseMs: 1000, heartbeatMs: 1000 },
      { leaseMs: 1000, heartbeatMs: 2000 },
      { heartbeatMs: -1 },
      { heartbeatMs: Number.NaN },
      { maxExecutionMs: 0 },
      { maxExecutionMs: -5 },
    ];
    for (const options of bad) {
      assert.throws(() => new IdempotencyEngine({ store, ...options }), InvalidOptionError, JSON.stringify(options));
    }
  });

  it('with a heartbeat, requires retentionMs > maxExecutionMs + leaseMs (a live lease never outlasts retention)', () => {
    const invalid = (options: Partial<EngineOptions>) =>
      assert.throws(
        () => new IdempotencyEngine({ store, ...options }),
        (error: unknown) => error instanceof InvalidOptionError && /retentionMs/.test(error.message) && /maxExecutionMs/.test(error.message),
        JSON.stringify(options),
      );
    invalid({ leaseMs: 1000, maxExecutionMs: 10_000, retentionMs: 11_000 });
    invalid({ leaseMs: 1000, maxExecutionMs: 10_000, retentionMs: 10_999 });
    invalid({ leaseMs: 1000, retentionMs: 11_000 }); // default maxExecutionMs: 10 × leaseMs
    invalid({ leaseMs: 1000, heartbeatMs: 100, maxExecutionMs: 5000, retentionMs: 6000 });
    invalid({ leaseMs: 60_000, retentionMs: 600_000 }); // all defaults but retention: 10 min < 11 min
    assert.equal(new IdempotencyEngine({ store, leaseMs: 1000, maxExecutionMs: 10_000, retentionMs: 11_001 }).retentionMs, 11_001);
    assert.equal(new IdempotencyEngine({ store, leaseMs: 1000, retentionMs: 11_001 }).maxExecutionMs, 10_000);
    // Without a heartbeat a lease never outlives its last write: retention > lease is enough.
    assert.equal(new IdempotencyEngine({ store, leaseMs: 1000, heartbeatMs: 0, retentionMs: 1001 }).retentionMs, 1001);
    assert.equal(new IdempotencyEngine({ store, leaseMs: 1000, heartbeatMs: 0, maxExecutionMs: 99_000, retentionMs: 2000 }).heartbeatMs, 0);
  });

  it('accepts heartbeatMs 0 and derives defaults', () => {
    assert.equal(new IdempotencyEngine({ store, heartbeatMs: 0 }).heartbeatMs, 0);
    const engine = new IdempotencyEngine({ store, leaseMs: 900 });
    assert.equal(engine.leaseMs, 900);
    assert.equal(engine.heartbeatMs, 300);
    assert.equal(engine.maxExecutionMs, 9000);
    assert.equal(engine.retentionMs, 86_400_000);
  });
});
