/**
 * The adapter contract suite (test/helpers/adapter-suite.ts) run against Next.js
 * (test/helpers/harness-next.ts: the example app built by `next build` and served in this
 * process by Next's own server) on every engine, the way test/adapters.test.ts runs it:
 * PGlite always, PostgreSQL when DATABASE_URL is set.
 */
import { after, before } from 'node:test';
import { adapterContractOverStores } from './helpers/adapter-run.js';
import { nextHarness, startNext, stopNext } from './helpers/harness-next.js';

before(async () => void (await startNext()), { timeout: 600_000 });
after(stopNext);

adapterContractOverStores('HTTP adapters (Next.js)', [nextHarness]);
