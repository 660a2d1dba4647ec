/**
 * The adapter contract suite (test/helpers/adapter-suite.ts) run against every adapter — the
 * web-standard core, Hono and Express — over every store of test/helpers/stores.ts `suiteStores`. One store
 * backend is connected per store and shared by the adapters; the memory store runs on a
 * mocked `Date` (its clock), so its retention waits take no time.
 */
import { after, describe } from 'node:test';
import { harnesses } from './helpers/adapter-harness.js';
import { adapterContract, unreachableStoreContract } from './helpers/adapter-suite.js';
import { suiteStores, useStoreBackend } from './helpers/stores.js';
import { realTime, virtualDate } from './helpers/wait.js';

for (const factory of suiteStores) {
  describe(`HTTP adapters over ${factory.name}`, () => {
    const conn = useStoreBackend(factory);
    const time = factory.capabilities.virtualTime ? virtualDate : realTime;
    for (const harness of harnesses) {
      describe(harness.name, () => adapterContract({ harness, backend: conn.backend, cleanup: conn.cleanup, time }));
    }
  });
}

describe('HTTP adapters with an unreachable store', () => {
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  });
  for (const harness of harnesses) {
    describe(harness.name, () => unreachableStoreContract(harness, (fn) => void cleanups.push(fn)));
  }
});
