/**
 * Runs the adapter contract suite (adapter-suite.ts) over a list of harnesses on the stores of
 * `suiteStores` (test/helpers/stores.ts), plus the unreachable-store contract. One store backend
 * is connected per store and shared by the harnesses; a store with virtual time (the memory
 * store) runs on a mocked `Date`. Each adapter test file is one call.
 *
 * Which harness runs on which store ({@link runsOn}; docs/architecture.md, "What each suite
 * proves"): the web core on every suite store, in every tier; every other harness on the stores
 * that change adapter behaviour (`adapterMatrix`: memory, PGlite, PostgreSQL, Redis with
 * PostgreSQL phases) in the full matrix (`npm run test:all`), and on the memory store alone in
 * `npm test`. An adapter's own glue is the same on every store; a store's own behaviour under
 * HTTP is the same under every adapter.
 */
import { after, describe } from 'node:test';
import { type AdapterHarness, webCore } from './adapter-harness.js';
import { adapterContract, unreachableStoreContract } from '../contracts/adapter.js';
import { fullMatrix } from './services.js';
import { type StoreFactory, suiteStores, useStoreBackend } from './stores.js';
import { realTime, virtualDate } from './wait.js';

/** Whether the adapter contract runs `harness` on `factory` (see the file's comment). */
export function runsOn(harness: AdapterHarness, factory: StoreFactory): boolean {
  if (harness === webCore) return true;
  if (factory.adapterHarnesses?.includes(harness.name)) return fullMatrix;
  if (!factory.adapterMatrix) return false;
  return fullMatrix || factory.capabilities.virtualTime;
}

/**
 * @param options.stores the stores to run over, every harness on each @default suiteStores, by {@link runsOn}
 * @param options.replayCache run every app with a replay cache (protocol.md K20)
 */
export function adapterContractOverStores(title: string, harnesses: AdapterHarness[], options: { stores?: StoreFactory[]; replayCache?: boolean } = {}): void {
  for (const factory of options.stores ?? suiteStores) {
    const onStore = options.stores ? harnesses : harnesses.filter((harness) => runsOn(harness, factory));
    if (onStore.length === 0) continue;
    describe(`${title} over ${factory.name}`, () => {
      const conn = useStoreBackend(factory);
      const time = factory.capabilities.virtualTime ? virtualDate : realTime;
      for (const harness of onStore) {
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
