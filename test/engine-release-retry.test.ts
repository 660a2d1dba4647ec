/**
 * The background release retry (protocol.md K23, item 4): a release the store missed is tried
 * again for two leases; when it gives up, the engine reports `store-unavailable` for the key, so
 * an operator sees that the next takeover will count a crash. Over a store that refuses every
 * release (a wrapper of the memory store) and one that refuses only the first.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { StoreUnavailableError } from '../src/core/errors.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import type { IdempotencyEvent } from '../src/engine/execution.js';
import { MemoryStore } from '../src/memory/index.js';

/** A memory store whose `release` throws StoreUnavailableError while `failing()` says so. */
function refusingReleases(failing: () => boolean): { store: MemoryStore; tries: () => number } {
  const store = new MemoryStore();
  const release = store.release.bind(store);
  let tries = 0;
  store.release = async (ref) => {
    tries++;
    if (failing()) throw new StoreUnavailableError('idem: the store refused the release (test)');
    return release(ref);
  };
  return { store, tries: () => tries };
}

/** The first event of `type`, or a rejection after `ms`. */
function nextEvent(events: IdempotencyEvent[], listeners: Array<() => void>, type: IdempotencyEvent['type'], ms: number): Promise<IdempotencyEvent> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${type} event within ${ms} ms: ${events.map((e) => e.type).join(', ')}`)), ms);
    const check = () => {
      const found = events.find((e) => e.type === type);
      if (found) {
        clearTimeout(timer);
        resolve(found);
      }
    };
    listeners.push(check);
    check();
  });
}

const input = { scope: 'orders', key: 'k-1', fingerprint: new Uint8Array(32) };

describe('the background release retry (protocol.md K23)', () => {
  it('gives up after two leases and reports store-unavailable for the key and its token', async () => {
    const { store, tries } = refusingReleases(() => true);
    const events: IdempotencyEvent[] = [];
    const listeners: Array<() => void> = [];
    const engine = new IdempotencyEngine({
      store,
      leaseMs: 600,
      heartbeatMs: 0,
      onEvent: (e) => {
        events.push(e);
        for (const l of listeners) l();
      },
    });
    const begun = await engine.begin(input);
    assert.equal(begun.kind, 'execute');
    const x = begun.execution;
    await assert.rejects(x.release(), StoreUnavailableError);
    const started = performance.now();
    const gaveUp = await nextEvent(events, listeners, 'store-unavailable', 10_000);
    assert.deepEqual(gaveUp, { type: 'store-unavailable', scope: 'orders', key: 'k-1', token: x.token });
    assert.ok(tries() >= 3, `the release was tried again before giving up (${tries()} tries)`);
    assert.ok(performance.now() - started < 2 * 600 + 500, 'it gave up within two leases');
    assert.deepEqual(
      events.map((e) => e.type),
      ['claimed', 'store-unavailable'],
      'reported once, and no released event',
    );
  });

  it('reports released, not store-unavailable, when a retry lands', async () => {
    let refused = 0;
    const { store } = refusingReleases(() => refused++ < 2);
    const events: IdempotencyEvent[] = [];
    const listeners: Array<() => void> = [];
    const engine = new IdempotencyEngine({
      store,
      leaseMs: 2_000,
      heartbeatMs: 0,
      onEvent: (e) => {
        events.push(e);
        for (const l of listeners) l();
      },
    });
    const begun = await engine.begin(input);
    assert.equal(begun.kind, 'execute');
    await assert.rejects(begun.execution.release(), StoreUnavailableError);
    await nextEvent(events, listeners, 'released', 10_000);
    assert.deepEqual(
      events.map((e) => e.type),
      ['claimed', 'released'],
    );
  });
});
