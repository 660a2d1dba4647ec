/**
 * The adapter contract suite (test/helpers/adapter-suite.ts) run against Next.js
 * (test/helpers/harness-next.ts: the example app built by `next build` and served in this
 * process by Next's own server) on every engine, the way test/adapters.test.ts runs it:
 * PGlite always, PostgreSQL when DATABASE_URL is set.
 */
import { after, before, describe } from 'node:test';
import { adapterContract, unreachableStoreContract } from './helpers/adapter-suite.js';
import { engines, useEngine } from './helpers/engines.js';
import { nextHarness, startNext, stopNext } from './helpers/harness-next.js';

before(async () => void (await startNext()), { timeout: 600_000 });
after(stopNext);

for (const engine of engines) {
  describe(`HTTP adapters over ${engine.name}`, () => {
    const db = useEngine(engine);
    describe(nextHarness.name, () => adapterContract(nextHarness, db.client, db.cleanup));
  });
}

describe('HTTP adapters with an unreachable store', () => {
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  });
  describe(nextHarness.name, () => unreachableStoreContract(nextHarness, (fn) => void cleanups.push(fn)));
});
