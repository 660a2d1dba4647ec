/**
 * The adapter contract suite (test/contracts/adapter.ts) run against Koa 3
 * (test/helpers/harness-koa.ts) on every engine, the way test/adapters.test.ts runs it over
 * the web core, Hono and Express: PGlite always, PostgreSQL when DATABASE_URL is set.
 */
import { adapterContractOverStores } from './helpers/adapter-run.js';
import { koaHarness } from './helpers/harness-koa.js';

adapterContractOverStores('HTTP adapters (Koa)', [koaHarness]);
