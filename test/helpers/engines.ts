/**
 * The database engines every store test runs against: embedded PGlite always, and real
 * PostgreSQL when DATABASE_URL is set (as .ci/run does). Each test gets its own table so
 * test files can run in parallel against one PostgreSQL.
 */
import { after, before } from 'node:test';
import { pglite } from './pglite.js';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { PostgresStore } from '../../src/postgres/index.js';
import type { SqlClient } from '../../src/postgres/client.js';

export interface TestEngine {
  name: 'pglite' | 'postgres';
  /** Opens a fresh client; close it with `close()`. */
  open(): Promise<{ client: SqlClient; close(): Promise<void> }>;
}

export const engines: TestEngine[] = [
  {
    name: 'pglite',
    async open() {
      const db = pglite();
      await db.waitReady;
      return { client: db, close: () => db.close() };
    },
  },
];

if (process.env.DATABASE_URL) {
  engines.push({
    name: 'postgres',
    async open() {
      const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 20 });
      return { client: pool, close: () => pool.end() };
    },
  });
}

/** A unique table name for one test. */
export function tableName(prefix = 'idem_test'): string {
  return `${prefix}_${randomBytes(6).toString('hex')}`;
}

/**
 * A migrated store on a fresh table (partitioned with `options.partitioned`); `drop()` removes
 * the table (with its partitions) and its token sequence.
 */
export async function freshStore(client: SqlClient, table = tableName(), options: { partitioned?: boolean } = {}) {
  const store = new PostgresStore({ client, table, partitioned: options.partitioned });
  await store.migrate();
  return {
    store,
    table,
    drop: async () => {
      const db = client as { query(t: string): Promise<unknown> };
      await db.query(`DROP TABLE IF EXISTS "${table}_blobs"`);
      await db.query(`DROP TABLE IF EXISTS "${table}"`);
      await db.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
    },
  };
}

/**
 * Call inside a `describe`: opens the engine's client before its tests and, after them, runs
 * the registered cleanups (last registered first, errors ignored) and closes the client.
 */
export function useEngine(engine: TestEngine): { client(): SqlClient; cleanup(fn: () => Promise<void>): void } {
  let db: { client: SqlClient; close(): Promise<void> } | undefined;
  const cleanups: Array<() => Promise<void>> = [];
  before(async () => {
    db = await engine.open();
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn().catch(() => undefined);
    await db?.close();
  });
  return {
    client: () => db!.client,
    cleanup: (fn) => void cleanups.push(fn),
  };
}
