/**
 * The adapter contract suite (test/contracts/adapter.ts) run against the web-standard core,
 * Hono and Express over every store of test/helpers/stores.ts `suiteStores`.
 */
import { harnesses } from './helpers/adapter-harness.js';
import { adapterContractOverStores } from './helpers/adapter-run.js';

adapterContractOverStores('HTTP adapters', harnesses);
