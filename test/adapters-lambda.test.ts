/**
 * The adapter contract suite (test/helpers/adapter-suite.ts) run against idem/lambda in its
 * three event formats — API Gateway REST API (1.0), HTTP API (2.0) and Lambda function URLs —
 * through test/helpers/harness-lambda.ts, on every engine, the way test/adapters.test.ts runs
 * it: PGlite always, PostgreSQL when DATABASE_URL is set.
 */
import { after, describe } from 'node:test';
import { adapterContract, unreachableStoreContract } from './helpers/adapter-suite.js';
import { engines, useEngine } from './helpers/engines.js';
import { lambdaHarnesses } from './helpers/harness-lambda.js';

for (const engine of engines) {
  describe(`HTTP adapters over ${engine.name}`, () => {
    const db = useEngine(engine);
    for (const harness of lambdaHarnesses) {
      describe(harness.name, () => adapterContract(harness, db.client, db.cleanup));
    }
  });
}

describe('HTTP adapters with an unreachable store', () => {
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  });
  for (const harness of lambdaHarnesses) {
    describe(harness.name, () => unreachableStoreContract(harness, (fn) => void cleanups.push(fn)));
  }
});
