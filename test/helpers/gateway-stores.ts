/** The stores the gateway suites run on: memory always, PostgreSQL when DATABASE_URL is set (its own table, dropped after). */
import pg from 'pg';
import { MemoryStore } from '../../src/memory/index.js';
import { PostgresStore } from '../../src/postgres/index.js';
import type { IdempotencyStore } from '../../src/store/types.js';
import { serviceUrl } from './services.js';

export interface GatewayStore {
  name: string;
  open(): Promise<{ store: IdempotencyStore; close(): Promise<void> }>;
}

export const gatewayStores: GatewayStore[] = [
  { name: 'memory', open: async () => ({ store: new MemoryStore() as IdempotencyStore, close: async () => undefined }) },
];

const databaseUrl = serviceUrl('DATABASE_URL');
if (databaseUrl) {
  gatewayStores.push({
    name: 'postgres',
    async open() {
      const pool = new pg.Pool({ connectionString: databaseUrl, max: 8 });
      const table = `gw_${process.pid}_${Math.floor(Math.random() * 1e9)}`;
      const store = new PostgresStore({ client: pool, table });
      await store.migrate();
      return {
        store: store as unknown as IdempotencyStore,
        async close() {
          await pool.query(`DROP TABLE IF EXISTS ${table}_blobs, ${table} CASCADE; DROP SEQUENCE IF EXISTS ${table}_lock_version_seq`).catch(() => undefined);
          await pool.end();
        },
      };
    },
  });
}

const redisUrl = serviceUrl('REDIS_URL');
if (redisUrl) {
  gatewayStores.push({
    name: 'redis',
    async open() {
      const { createClient } = await import('@redis/client');
      const { RedisStore } = await import('../../src/redis/index.js');
      const client = createClient({ url: redisUrl });
      await client.connect();
      return {
        store: new RedisStore({ client, prefix: `gw-${process.pid}-${Math.floor(Math.random() * 1e9)}` }) as IdempotencyStore,
        close: () => client.close(),
      };
    },
  });
}

if (serviceUrl('MYSQL_URL')) {
  gatewayStores.push({
    name: 'mysql',
    async open() {
      const { openMySqlDatabase } = await import('./mysql-stores.js');
      const { MySqlStore } = await import('../../src/mysql/index.js');
      const db = await openMySqlDatabase();
      const store = new MySqlStore({ client: db.pool, table: 'gw_keys' });
      await store.migrate();
      return { store: store as unknown as IdempotencyStore, close: () => db.close() };
    },
  });
}
