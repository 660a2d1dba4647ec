/**
 * The suites of `RedisStore` + `PostgresPhases` (test/redis-pg-phases.test.ts,
 * test/redis-lost-claim.test.ts): one database engine and the machine's Redis (node-redis),
 * opened before the suite and closed after it.
 */
import { after, before } from 'node:test';
import type { TestEngine } from './engines.js';
import { singleClients, type TestClient } from './redis.js';

/** Registers the suite's hooks; the returned object holds both once `before` ran. */
export function redisAndDatabase(engine: TestEngine): { db: Awaited<ReturnType<TestEngine['open']>>; redis: TestClient } {
  const open = {} as { db: Awaited<ReturnType<TestEngine['open']>>; redis: TestClient };
  before(async () => {
    open.db = await engine.open();
    open.redis = await singleClients[0]!.open();
  });
  after(async () => {
    await open.redis?.close();
    await open.db?.close();
  });
  return open;
}
