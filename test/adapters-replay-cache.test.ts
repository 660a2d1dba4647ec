/**
 * The adapter contract suite (test/contracts/adapter.ts) with a replay cache on every app
 * (protocol.md K20), for the web-standard core and Hono, over the memory store on its real
 * clock and real PostgreSQL: every HTTP behaviour holds with replays answered from memory.
 */
import { hono, webCore } from './helpers/adapter-harness.js';
import { adapterContractOverStores } from './helpers/adapter-run.js';
import { memoryRealClockFactory, suiteStores } from './helpers/stores.js';

const stores = [memoryRealClockFactory, ...suiteStores.filter((f) => f.name === 'PostgresStore on PostgreSQL')];
adapterContractOverStores('HTTP adapters with a replay cache', [webCore, hono], { stores, replayCache: true });
