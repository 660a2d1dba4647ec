/**
 * The stores the non-HTTP wrappers (idem/function, idem/lambda batches, idem/webhooks) run
 * over: the adapter matrix's entries of test/helpers/stores.ts — the memory store, PostgresStore
 * on PGlite, on PostgreSQL (DATABASE_URL) and RedisStore + PostgresPhases (REDIS_URL) — the same
 * entries the HTTP Lambda handler's contract runs on.
 */
import { storeFactories, type StoreFactory, type StoreHarness, useStoreBackend } from './stores.js';

export const workStores: StoreFactory[] = storeFactories.filter((factory) => factory.adapterMatrix);

/** Call inside a `describe`: a fresh store per call, dropped after the suite. */
export function useWorkStore(factory: StoreFactory): () => Promise<StoreHarness> {
  const backend = useStoreBackend(factory);
  return async () => {
    const harness = await backend.backend().fresh();
    backend.cleanup(() => harness.drop());
    return harness;
  };
}
