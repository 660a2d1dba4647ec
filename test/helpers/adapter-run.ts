/**
 * Runs the adapter contract suite (adapter-suite.ts) over a list of harnesses on every store of
 * `suiteStores` (test/helpers/stores.ts), plus the unreachable-store contract. One store backend
 * is connected per store and shared by the harnesses; a store with virtual time (the memory
 * store) runs on a mocked `Date`. Each adapter test file is one call.
 */
import { after, describe } from 'node:test';
import type { AdapterHarness } from './adapter-harness.js';
import { adapterContract, unreachableStoreContract } from './adapter-suite.js';
import { suiteStores, useStoreBackend } from './stores.js';
import { realTime, virtualDate } from './wait.js';

export function adapterContractOverStores(title: string, harnesses: AdapterHarness[]): void {
  for (const factory of suiteStores) {
    describe(`${title} over ${factory.name}`, () => {
      const conn = useStoreBackend(factory);
      const time = factory.capabilities.virtualTime ? virtualDate : realTime;
      for (const harness of harnesses) {
        describe(harness.name, () => adapterContract({ harness, backend: conn.backend, cleanup: conn.cleanup, time }));
      }
    });
  }

  describe(`${title} with an unreachable store`, () => {
    const cleanups: Array<() => Promise<void>> = [];
    after(async () => {
      for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
    });
    for (const harness of harnesses) {
      describe(harness.name, () => unreachableStoreContract(harness, (fn) => void cleanups.push(fn)));
    }
  });
}
