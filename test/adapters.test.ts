/**
 * The adapter contract suite (test/helpers/adapter-suite.ts) run against every adapter — the
 * web-standard core, Hono and Express — on every engine: PGlite always, PostgreSQL when
 * DATABASE_URL is set. One engine client is opened per engine and shared by the adapters.
 */
import { after, describe } from 'node:test';
import { harnesses } from './helpers/adapter-harness.js';
import { adapterContract, unreachableStoreContract } from './helpers/adapter-suite.js';
import { engines, useEngine } from './helpers/engines.js';

for (const engine of engines) {
  describe(`HTTP adapters over ${engine.name}`, () => {
    const db = useEngine(engine);
    for (const harness of harnesses) {
      describe(harness.name, () => adapterContract(harness, db.client, db.cleanup));
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
