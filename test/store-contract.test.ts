/**
 * The store contract (test/helpers/store-contract.ts) over every store in
 * test/helpers/stores.ts: the memory store, PostgresStore on PGlite (plain and partitioned)
 * and, when DATABASE_URL is set, on PostgreSQL (plain and partitioned).
 */
import { describe } from 'node:test';
import { storeContract } from './helpers/store-contract.js';
import { storeFactories } from './helpers/stores.js';
import { citusNotice } from './helpers/citus-stores.js';

citusNotice();
for (const factory of storeFactories) {
  describe(`store contract: ${factory.name}`, () => storeContract(factory));
}
