/**
 * The store settings of the guides, each a function that returns a migrated store: partitioned
 * tables (docs/guides/operations.md), Citus (docs/guides/citus.md), large responses and
 * encryption at rest (docs/guides/large-responses.md), Redis with its phases in PostgreSQL
 * (docs/guides/redis.md). Type-checked with the examples; each is run by the suites of its store.
 */
import type { SqlClient } from 'idem/postgres';
import { PostgresStore } from 'idem/postgres';
import { PostgresPhases, RedisStore, type RedisClientLike } from 'idem/redis';

export async function partitionedStore(pool: SqlClient) {
  // #region partitioned
  const store = new PostgresStore({ client: pool, partitioned: true }); // or { daysAhead: 7, dropLockTimeoutMs: 1000 }
  await store.migrate(); // the partitioned table + partitions from yesterday to 7 days ahead
  await store.maintain(); // daily (or `idem partitions`): keeps the partitions ahead
  await store.sweep(); // drops each partition whose whole day is past retention
  // #endregion partitioned
  return store;
}

export async function citusStore(pool: SqlClient) {
  // #region citus
  const store = new PostgresStore({ client: pool /* the coordinator */, distributed: 'citus' });
  await store.migrate(); // as ever; safe on every start, also after distribution
  await store.distribute(); // create_distributed_table('idempotency_keys', 'scope') and <table>_blobs co-located; idempotent
  // then, once: SELECT create_distributed_table('orders', 'tenant_id', colocate_with => 'idempotency_keys');
  // #endregion citus
  return store;
}

export function largeResponses(pool: SqlClient) {
  // #region inline
  const store = new PostgresStore({ client: pool, inlineMaxBytes: 64 * 1024 }); // Infinity: always inline
  // #endregion inline
  return store;
}

export function encryptedStore(pool: SqlClient) {
  // #region encryption
  const store = new PostgresStore({
    client: pool,
    encryption: {
      keys: { '2026-11': process.env.IDEM_KEY_2026_11!, '2026-05': process.env.IDEM_KEY_2026_05! }, // 32 bytes, base64 or Buffer
      currentKeyId: '2026-11',
    },
  });
  // #endregion encryption
  return store;
}

export async function redisWithPhases(pool: SqlClient, redis: RedisClientLike) {
  // #region postgres-phases
  const phases = new PostgresPhases({ client: pool }); // pg.Pool or PGlite; table idempotency_phases
  await phases.migrate();
  const store = new RedisStore({ client: redis, phases, prefix: 'orders-api' }); // phases get a transaction on `pool` again
  // #endregion postgres-phases
  return store;
}
