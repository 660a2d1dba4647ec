/**
 * The adapter contract suite (test/helpers/adapter-suite.ts) run against Koa 3
 * (test/helpers/harness-koa.ts) on every engine, the way test/adapters.test.ts runs it over
 * the web core, Hono and Express: PGlite always, PostgreSQL when DATABASE_URL is set.
 */
import { after, describe } from 'node:test';
import { adapterContract, unreachableStoreContract } from './helpers/adapter-suite.js';
import { engines, useEngine } from './helpers/engines.js';
import { koaHarness } from './helpers/harness-koa.js';

for (const engine of engines) {
  describe(`HTTP adapters over ${engine.name}`, () => {
    const db = useEngine(engine);
    describe(koaHarness.name, () => adapterContract(koaHarness, db.client, db.cleanup));
  });
}

describe('HTTP adapters with an unreachable store', () => {
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  });
  describe(koaHarness.name, () => unreachableStoreContract(koaHarness, (fn) => void cleanups.push(fn)));
});
