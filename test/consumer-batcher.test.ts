/**
 * DeliveryBatcher (protocol.md K39): how the broker adapters gather deliveries into batches.
 * No services: batches are settled by the test.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DeliveryBatcher } from '../src/consumer/batcher.js';

/** A batcher whose batches end when the test says; `started` lists the batches in order. */
function harness(maxRunning: number) {
  const started: number[][] = [];
  const ends: Array<() => void> = [];
  let onStart: (() => void) | undefined;
  const batcher = new DeliveryBatcher<number>(
    (batch) =>
      new Promise<void>((resolve) => {
        started.push(batch);
        ends.push(resolve);
        onStart?.();
      }),
    maxRunning,
  );
  /** Resolves once `n` batches have started. */
  const startedCount = (n: number) =>
    new Promise<void>((resolve) => {
      onStart = () => started.length >= n && resolve();
      onStart();
    });
  /** A few turns of the event loop: a batch that was going to start has started by then. */
  const turns = async () => {
    for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
  };
  return { batcher, started, ends, startedCount, turns };
}

describe('DeliveryBatcher (protocol.md K39)', () => {
  it('starts a batch at once while fewer than maxRunning run, and gathers what arrives meanwhile into the next', async () => {
    const { batcher, started, ends, startedCount, turns } = harness(2);
    batcher.add(1);
    await startedCount(1);
    batcher.add(2);
    await startedCount(2);
    batcher.add(3);
    batcher.add(4);
    await turns();
    assert.deepEqual(started, [[1], [2]], 'two running: the rest wait');
    ends[0]!();
    await startedCount(3);
    assert.deepEqual(started[2], [3, 4], 'the deliveries gathered meanwhile go as one batch');
    ends[1]!();
    ends[2]!();
    await batcher.drained();
  });
});
