/**
 * The crash-suspect gate of IdempotentConsumer (protocol.md K23 5), in one process on the
 * memory store: a redelivery whose key a dead worker left `started`, its lease run out, waits
 * unclaimed for the deliveries in flight, at most the lease; an ordinary redelivery and a
 * consumer with `isolateCrashSuspects: false` do not wait. The multi-process proof with real
 * brokers is test/poison-neighbours.test.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { IdempotentConsumer } from '../src/consumer/index.js';
import { MemoryStore } from '../src/memory/index.js';
import { until } from './helpers/consumer-setup.js';

const LEASE_MS = 1500;
const body = new TextEncoder().encode('{"order":1}');

/**
 * Runs `suspect` (attempt 2) while a first delivery hangs until the suspect's handler starts;
 * resolves with how long the suspect waited for its handler and whether the first was still running.
 */
async function race(options: { isolateCrashSuspects?: boolean; crashed: boolean }) {
  const store = new MemoryStore();
  const consumer = new IdempotentConsumer({ store, scope: 'orders', leaseMs: LEASE_MS, heartbeatMs: 0, retryDelayMs: 10, ...options });
  if (options.crashed) {
    // A worker (another process) that dies holding the key: its handler never returns, no heartbeat, the lease runs out.
    const dead = new IdempotentConsumer({ store, scope: 'orders', leaseMs: LEASE_MS, heartbeatMs: 0 });
    void dead.consume({ id: 'suspect', body, attempt: 1 }, () => new Promise(() => {}));
    await until(async () => (await store.get('orders', 'suspect', 86_400_000))?.leaseExpired === true, 10_000, 'the lease ran out');
  }
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let firstRunning = false;
  let firstStarted!: () => void;
  const started = new Promise<void>((resolve) => (firstStarted = resolve));
  const first = consumer.consume({ id: 'neighbour', body, attempt: 1 }, async () => {
    firstRunning = true;
    firstStarted();
    await released;
    firstRunning = false;
  });
  await started;
  const at = performance.now();
  let waited = 0;
  let alongside = false;
  const second = await consumer.consume({ id: 'suspect', body, attempt: 2 }, async () => {
    waited = performance.now() - at;
    alongside = firstRunning;
    release();
  });
  assert.equal(second.action, 'ack');
  assert.equal((await first).action, 'ack');
  return { waited, alongside };
}

describe('IdempotentConsumer: crash suspects run alone (protocol.md K23 5)', () => {
  it('a crash suspect waits for the delivery in flight, and a hung one stops blocking it after the lease', async () => {
    const { waited, alongside } = await race({ crashed: true });
    assert.ok(waited >= LEASE_MS - 50, `the suspect waited ${waited.toFixed(0)} ms for the handler in flight`);
    assert.ok(alongside, 'then it ran, the hung handler still in flight');
  });

  it('an ordinary redelivery (its key not left by a crash) does not wait', async () => {
    const { waited, alongside } = await race({ crashed: false });
    assert.ok(waited < LEASE_MS - 50, `it waited ${waited.toFixed(0)} ms`);
    assert.ok(alongside);
  });

  it('isolateCrashSuspects: false runs the suspect alongside at once', async () => {
    const { waited, alongside } = await race({ crashed: true, isolateCrashSuspects: false });
    assert.ok(waited < LEASE_MS - 50, `it waited ${waited.toFixed(0)} ms`);
    assert.ok(alongside);
  });
});
