/**
 * The store contract (test/contracts/store.ts) over every store in
 * test/helpers/stores.ts: the memory store, PostgresStore on PGlite (plain and partitioned)
 * and, when DATABASE_URL is set, on PostgreSQL (plain and partitioned).
 */
import { describe } from 'node:test';
import { storeContract } from './contracts/store.js';
import { storeFactories } from './helpers/stores.js';
import { citusNotice } from './helpers/citus-stores.js';

citusNotice();
for (const factory of storeFactories) {
  describe(`store contract: ${factory.name}`, () => storeContract(factory));
}
