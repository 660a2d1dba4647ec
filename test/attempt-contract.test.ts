/**
 * The attempt contract (test/contracts/attempt.ts) over every surface, on every kind of store
 * that counts failed attempts: memory, PGlite, PostgreSQL, MySQL/MariaDB, SQLite (node:sqlite,
 * better-sqlite3, libSQL), Redis (single, through node-redis and Valkey GLIDE, and with PostgresPhases as its ledger). The service stores run when their URLs are set, as .ci/run
 * does. The store-level variants (partitioned, group commit, the ORMs, Cluster) share the
 * counting statement of their kind: the store contract covers them.
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
  // Valkey GLIDE runs the same scripts through its own Script objects (protocol.md K55).
  'RedisStore on Redis (Valkey GLIDE)',
  'RedisStore + PostgresPhases (PGlite)',
  // SQLite: each client its own statement runner (synchronous, or libSQL's async one).
  'SqliteStore on node:sqlite',
  'SqliteStore on better-sqlite3',
  'SqliteStore on libSQL (file:)',
  'DurableObjectStore (SQLite-backed) in Miniflare',
  'D1Store in Miniflare',
]);

for (const factory of storeFactories.filter((f) => kinds.has(f.name))) {
  describe(`attempt contract: ${factory.name}`, () => attemptContract(factory));
}
