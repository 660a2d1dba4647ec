import { describe } from 'node:test';
import { storeContract } from './helpers/store-contract.js';
import { storeFactories } from './helpers/stores.js';
for (const factory of storeFactories.filter((f) => f.name.includes(process.env.ONLY ?? 'Drizzle'))) {
  describe(`store contract: ${factory.name}`, () => storeContract(factory));
}
