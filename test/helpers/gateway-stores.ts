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
