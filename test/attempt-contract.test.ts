/**
 * The attempt contract (test/contracts/attempt.ts) over every surface and every kind of store:
 * memory, PGlite, PostgreSQL, MySQL/MariaDB and Redis (alone and with PostgreSQL phases), the
 * service stores when their URLs are set (as .ci/run does).
 */
import { describe } from 'node:test';
import { attemptContract } from './contracts/attempt.js';
import { storeFactories } from './helpers/stores.js';

const kinds = new Set([
  'memory',
  'PostgresStore on PGlite',
  'PostgresStore on PostgreSQL',
  'MySqlStore on MariaDB/MySQL (mysql2)',
  'RedisStore on Redis',
  'RedisStore + PostgresPhases (PGlite)',
]);

for (const factory of storeFactories.filter((f) => kinds.has(f.name))) {
  describe(`attempt contract: ${factory.name}`, () => attemptContract(factory));
}
