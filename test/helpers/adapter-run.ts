/**
 * Runs the adapter contract suite (adapter-suite.ts) over a list of harnesses on every store of
 * `suiteStores` (test/helpers/stores.ts), plus the unreachable-store contract. One store backend
 * is connected per store and shared by the harnesses; a store with virtual time (the memory
 * store) runs on a mocked `Date`. Each adapter test file is one call.
 */
import { after, describe } from 'node:test';
import type { AdapterHarness } from './adapter-harness.js';
import { adapterContract, unreachableStoreContract } from './adapter-suite.js';
import { type StoreFactory, suiteStores, useStoreBackend } from './stores.js';
import { realTime, virtualDate } from './wait.js';

/**
 * @param options.stores the stores to run over @default suiteStores
 * @param options.replayCache run every app with a replay cache (protocol.md K20)
 */
export function adapterContractOverStores(title: string, harnesses: AdapterHarness[], options: { stores?: StoreFactory[]; replayCache?: boolean } = {}): void {
  for (const factory of options.stores ?? suiteStores) {
    describe(`${title} over ${factory.name}`, () => {
      const conn = useStoreBackend(factory);
      const time = factory.capabilities.virtualTime ? virtualDate : realTime;
      for (const harness of harnesses) {
        describe(harness.name, () =>
          adapterContract({ harness, backend: conn.backend, cleanup: conn.cleanup, time, replayCache: options.replayCache === true }),
        );
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
