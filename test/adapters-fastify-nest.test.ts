/**
 * The adapter contract suite (test/contracts/adapter.ts) run against Fastify and NestJS on
 * both of its platforms (Express and Fastify), each the real framework over a real socket, over
 * every store of test/helpers/stores.ts `suiteStores`.
 */
import { adapterContractOverStores } from './helpers/adapter-run.js';
import { fastifyHarness } from './helpers/harness-fastify.js';
import { nestExpressHarness, nestFastifyHarness } from './helpers/harness-nestjs.js';

adapterContractOverStores('HTTP adapters (Fastify, NestJS)', [fastifyHarness, nestExpressHarness, nestFastifyHarness]);
