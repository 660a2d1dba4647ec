/**
 * The store contract: what every IdempotencyStore must do, run over every store in
 * test/helpers/stores.ts by test/store-contract.test.ts. Claim, replay, mismatch and
 * in-progress reads, takeover with a higher token, every write after the claim fenced, effects
 * rolled back when fenced, release and discard, retention counts as absent, sweep (where the
 * store has it), the completer's saveRequest and listAbandoned, and concurrent claims.
 *
 * The contract reaches a store's state only through the factory's backdoors (age a key, set
 * its lease, read its token, count effects), never through SQL; PostgreSQL-only behaviour
 * (SQL shapes, migrations, columns, partitions, blobs, encryption) is tested in its own files.
 */
import { afterEach, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import type { IdempotencyStore, KeyRef } from '../../src/store/types.js';
import { useStoreBackend, type StoreFactory, type StoreHarness } from '../helpers/stores.js';
import { claimedToken, claimInput, HOUR_MS, LONG_LEASE_MS, RETENTION_MS, SCOPE, type ContractContext } from './store/shared.js';
import { claimSuite } from './store/claim.js';
import { writeSuite } from './store/writes.js';
import { fencingSuite } from './store/fencing.js';
import { attemptsSuite } from './store/attempts.js';
import { operatorSuite } from './store/operator.js';
import { capabilitiesSuite } from './store/capabilities.js';

export { claimInput, claimedToken } from './store/shared.js';

/** Runs the store contract over the store `factory` opens; call inside a `describe`. */
export function storeContract(factory: StoreFactory): void {
  const conn = useStoreBackend(factory);
  let h: StoreHarness;
  let store: IdempotencyStore;

  beforeEach(async () => {
    h = await conn.backend().fresh();
    store = h.store;
  });
  afterEach(async () => {
    await h.drop();
  });

  const ref = (key: string, token: number): KeyRef => ({ scope: SCOPE, key, token });
  const context: ContractContext = {
    h: () => h,
    store: () => store,
    caps: factory.capabilities,
    ref,
    age: (key) => h.age(SCOPE, key, HOUR_MS),
    renewLease: (key) => h.setLease(SCOPE, key, LONG_LEASE_MS),
    snapshot: (key) => h.snapshot(SCOPE, key),
    get: (key, scope = SCOPE) => store.get(scope, key, RETENTION_MS),
    async claimAndTakeOver(key) {
      const token = claimedToken(await store.claim(claimInput(key, { leaseMs: 0 })));
      const taken = await store.takeOver(ref(key, token), LONG_LEASE_MS);
      assert.equal(taken.kind, 'taken');
      const newToken = (taken as { token: number }).token;
      assert.ok(newToken > token, `the takeover token ${newToken} must exceed the claim token ${token}`);
      return { ref: ref(key, newToken), stale: ref(key, token) };
    },
  };
  claimSuite(context);
  writeSuite(context);
  fencingSuite(context);
  attemptsSuite(context);
  operatorSuite(context);
  capabilitiesSuite(context);
}
