/**
 * DeliveryBatcher (protocol.md K39): how the broker adapters gather deliveries into batches.
 * No services: batches are settled by the test.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DeliveryBatcher } from '../src/consumer/batcher.js';

/** A batcher whose batches end when the test says; `started` lists the batches in order. */
function harness(maxRunning: number, minSize: number) {
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
    minSize,
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
  it('starts what arrived together at once when no batch runs, and beside a running batch only once minSize deliveries are gathered', async () => {
    const { batcher, started, ends, startedCount, turns } = harness(2, 3);
    batcher.add(1);
    await startedCount(1);
    assert.deepEqual(started, [[1]], 'nothing running: a batch of one starts at once');
    batcher.add(2);
    batcher.add(3);
    await turns();
    assert.equal(started.length, 1, 'two gathered beside a running batch: below minSize, they wait');
    batcher.add(4);
    await startedCount(2);
    assert.deepEqual(started[1], [2, 3, 4], 'the third makes minSize: the second batch starts');
    batcher.add(5);
    await turns();
    assert.equal(started.length, 2, 'maxRunning batches run: the next one waits');
    ends[0]!();
    await turns();
    assert.equal(started.length, 2, 'one batch still runs and one delivery is gathered: it waits for more');
    ends[1]!();
    await startedCount(3);
    assert.deepEqual(started[2], [5], 'none running: what is gathered starts, whatever its size');
    ends[2]!();
    await batcher.drained();
    assert.equal(batcher.count, 0);
  });

  it('runs up to maxRunning batches at once with minSize 1', async () => {
    const { batcher, started, ends, startedCount, turns } = harness(2, 1);
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
