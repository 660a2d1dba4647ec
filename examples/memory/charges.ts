/**
 * The in-memory store in a unit test: the same contract as the PostgreSQL store within one
 * process, and a clock the test moves instead of waiting for a lease. A crashed attempt (an
 * execution never finished) is taken over once its lease ran out on that clock.
 *
 * Run by test/guide-examples.test.ts.
 */
import { IdempotencyEngine } from 'idem';
import { MemoryStore } from 'idem/memory';

export async function crashAndTakeOver() {
  let now = 1_000_000; // epoch ms, moved by the test
  const store = new MemoryStore({ clock: () => now });
  const engine = new IdempotencyEngine({ store, leaseMs: 5_000, heartbeatMs: 0 });
  const fp = new Uint8Array(32);

  const first = await engine.begin({ scope: 'tests', key: 'k1', fingerprint: fp });
  if (first.kind !== 'execute') throw new Error('expected to run');
  await first.execution.phase('charge_created', async () => ({ id: 'ch_1' })); // then the "process dies"

  const duplicate = await engine.begin({ scope: 'tests', key: 'k1', fingerprint: fp }); // lease still held
  now += 5_001; // the lease runs out
  const retry = await engine.begin({ scope: 'tests', key: 'k1', fingerprint: fp });
  if (retry.kind !== 'execute') throw new Error('expected a takeover');
  const charge = await retry.execution.phase('charge_created', async () => ({ id: 'ch_2' })); // skipped: recorded
  await retry.execution.finish({ status: 201, headers: [], body: new TextEncoder().encode(JSON.stringify(charge)) });
  return { duplicate: duplicate.kind, charge };
}
