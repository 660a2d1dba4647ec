/**
 * The adapter contract suite (test/helpers/adapter-suite.ts) run against Fastify and NestJS on
 * both of its platforms (Express and Fastify), each the real framework over a real socket, on
 * every engine: PGlite always, PostgreSQL when DATABASE_URL is set.
 */
import { after, describe } from 'node:test';
import type { AdapterHarness } from './helpers/adapter-harness.js';
import { adapterContract, unreachableStoreContract } from './helpers/adapter-suite.js';
import { engines, useEngine } from './helpers/engines.js';
import { fastifyHarness } from './helpers/harness-fastify.js';
import { nestExpressHarness, nestFastifyHarness } from './helpers/harness-nestjs.js';

const harnesses: AdapterHarness[] = [fastifyHarness, nestExpressHarness, nestFastifyHarness];

for (const engine of engines) {
  describe(`HTTP adapters (Fastify, NestJS) over ${engine.name}`, () => {
    const db = useEngine(engine);
    for (const harness of harnesses) {
      describe(harness.name, () => adapterContract(harness, db.client, db.cleanup));
    }
  });
}

describe('HTTP adapters (Fastify, NestJS) with an unreachable store', () => {
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  });
  for (const harness of harnesses) {
    describe(harness.name, () => unreachableStoreContract(harness, (fn) => void cleanups.push(fn)));
  }
});
