/**
 * With REDIS_URL set, the example keeps claims, leases and replays in Redis (idem/redis) and
 * its business data where it always does (PostgreSQL or PGlite). The phases stay atomic:
 * `PostgresPhases` commits each phase's effects and recorded result in one transaction of the
 * example's database, fenced by the Redis token, so the handler code is unchanged.
 */
import type { Queryable, SqlClient } from 'idem/postgres';
import type { RedisStore } from 'idem/redis';
import { isMySql, type MySqlDatabase } from './mysql.js';

/** The Redis-backed store and how to close its connection. */
export interface RedisClaims {
  store: RedisStore<Queryable>;
  /** The Redis URL without password, for the banner. */
  location: string;
  close(): Promise<void>;
}

/**
 * Connects to REDIS_URL and builds the store, or returns `undefined` when REDIS_URL is unset.
 * @throws when Redis is unreachable, or the database is MySQL
 */
export async function openRedisClaims(db: SqlClient | MySqlDatabase, env: NodeJS.ProcessEnv = process.env): Promise<RedisClaims | undefined> {
  if (!env.REDIS_URL) return undefined;
  // PostgresPhases commits the phases in PostgreSQL; there is no MySQL counterpart.
  if (isMySql(db)) throw new Error('REDIS_URL needs a PostgreSQL (or PGlite) database for the phases, not MySQL');
  // Loaded only when asked for: a server without REDIS_URL never loads the Redis driver.
  const { createClient } = await import('@redis/client');
  const { PostgresPhases, RedisStore } = await import('idem/redis');
  const client = createClient({ url: env.REDIS_URL });
  client.on('error', () => undefined); // reconnects; a failing command reports its own error (503)
  await client.connect();
  const phases = new PostgresPhases({ client: db });
  if (env.IDEM_MIGRATE !== '0') await phases.migrate();
  const url = new URL(env.REDIS_URL);
  url.password = '';
  return {
    store: new RedisStore<Queryable>({ client, phases, prefix: env.IDEM_REDIS_PREFIX ?? 'idem' }),
    location: url.toString(),
    close: async () => void client.destroy(),
  };
}
