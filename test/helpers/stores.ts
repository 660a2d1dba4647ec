/**
 * Every store the store contract, the engine suite and the HTTP adapter suite run over: ONE
 * list, {@link storeFactories}. A new store plugs in with one entry (a {@link StoreFactory}):
 * it opens a fresh, empty store and hands the tests the backdoors the contract needs (move a
 * key back in time, end its lease, read its token, a business "effect" written inside the
 * store's transaction and counted), so no test names SQL or a driver.
 *
 * PGlite and the memory store always run; real PostgreSQL (plain and partitioned tables) when
 * DATABASE_URL is set, as .ci/run does.
 */
import { after, before } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { PostgresStore } from '../../src/postgres/index.js';
import type { Queryable, SqlClient } from '../../src/postgres/client.js';
import { MemoryStore, type MemoryTx } from '../../src/memory/index.js';
import type { IdempotencyStore } from '../../src/store/types.js';
import { tableName } from './engines.js';
import { redisClusterFactory, redisFactory, redisPostgresPhasesFactory } from './redis-stores.js';

/** What a store can do beyond the six methods; the contract runs the matching tests only. */
export interface StoreCapabilities {
  /**
   * `rows`: `sweep({ retentionMs, batchSize })` deletes keys past retention one by one (a
   * key with a valid lease stays); `partitions`: sweep drops whole days (tested in
   * test/ops-partitioned.test.ts); `false`: no sweep.
   */
  sweep: 'rows' | 'partitions' | false;
  /** The store keeps one table per UTC day (PostgreSQL partitioned mode). */
  partitioned: boolean;
  /** The store is a PostgreSQL database: PostgreSQL-only tests (blobs, encryption, SQL) may run on it. */
  sql: boolean;
  /**
   * `false`: a commit records its result AFTER the effects, never in one transaction with them
   * (RedisStore without PostgresPhases: `NoTransaction`), so a fenced or failed commit does
   * not undo effects that already ran; the contract checks that nothing is recorded instead.
   * @default true
   */
  atomicEffects?: false;
}

/**
 * One fresh store with the test's backdoors. `Tx` is the store's transaction handle.
 * Scopes and keys are the store's own (scope, key) pair; times are milliseconds.
 */
export interface StoreHarness<Tx = unknown> {
  store: IdempotencyStore<Tx>;
  /** The store's sweep, when `capabilities.sweep` is not false. */
  sweep?(options?: { retentionMs?: number; batchSize?: number }): Promise<number>;
  /**
   * A business effect for `commit`: records `note` inside the commit's transaction (gone
   * again if the commit is fenced or throws) and returns `{ note }`.
   */
  effect(note: string): (tx: Tx) => Promise<{ note: string }>;
  /** The notes of every effect that took hold, oldest first. */
  effects(): Promise<string[]>;
  /** Moves the key's creation time and its lease `ms` into the past (a worker long gone). */
  age(scope: string, key: string, ms: number): Promise<void>;
  /** Sets the key's lease to end `ms` from now (negative: ended), token unchanged: a heartbeat, or a lease run out. */
  setLease(scope: string, key: string, ms: number): Promise<void>;
  /** The key's current token, or `undefined` when absent. */
  tokenOf(scope: string, key: string): Promise<number | undefined>;
  /** Everything stored about a key, as a value to compare before and after (deepEqual). */
  snapshot(scope: string, key: string): Promise<unknown>;
  /** Keys held, past retention or not. */
  count(): Promise<number>;
  /**
   * Makes the key (alone, with its lease over) what the store's sweep deletes next: past
   * retention for a row sweep, in yesterday's partition for a partitioned one; then sweeps.
   * @returns the number of keys the sweep deleted
   */
  sweepKey?(scope: string, key: string): Promise<number>;
  /** Removes what `fresh` created (tables, sequences). */
  drop(): Promise<void>;
}

/** A connection to a store's backend, shared by the tests of one `describe`. */
export interface StoreBackend {
  /** A fresh, empty store. */
  fresh(): Promise<StoreHarness>;
  /** For PostgreSQL stores: the client, for suites that build stores with other options. */
  client?: SqlClient;
  close(): Promise<void>;
}

/** One store in the list: a name for test titles, its capabilities, and how to connect. */
export interface StoreFactory {
  name: string;
  capabilities: StoreCapabilities;
  connect(): Promise<StoreBackend>;
}

const q = (client: SqlClient): Queryable => client as Queryable;

/** The PostgreSQL store on `open()`'s client; every `fresh()` a new table. */
function postgresFactory(name: string, open: () => Promise<{ client: SqlClient; close(): Promise<void> }>, partitioned: boolean): StoreFactory {
  return {
    name,
    capabilities: { sweep: partitioned ? 'partitions' : 'rows', partitioned, sql: true },
    async connect() {
      const db = await open();
      const client = db.client;
      return {
        client,
        close: () => db.close(),
        async fresh() {
          const table = tableName();
          const side = `${table}_side`;
          const store = new PostgresStore({ client, table, partitioned });
          await store.migrate();
          await q(client).query(`CREATE TABLE "${side}" (id serial PRIMARY KEY, note text NOT NULL)`);
          const where = `WHERE scope = $1 AND key = $2`;
          const harness: StoreHarness<Queryable> = {
            store,
            sweep: (options) => store.sweep(options),
            effect: (note) => async (tx) => {
              await tx.query(`INSERT INTO "${side}" (note) VALUES ($1)`, [note]);
              return { note };
            },
            effects: async () => (await q(client).query(`SELECT note FROM "${side}" ORDER BY id`)).rows.map((r) => String(r.note)),
            async age(scope, key, ms) {
              await q(client).query(
                `UPDATE "${table}" SET created_at = created_at - $3::int8 * interval '1 millisecond',
                   locked_until = locked_until - $3::int8 * interval '1 millisecond' ${where}`,
                [scope, key, ms],
              );
            },
            async setLease(scope, key, ms) {
              await q(client).query(`UPDATE "${table}" SET locked_until = now() + $3::int8 * interval '1 millisecond' ${where}`, [scope, key, ms]);
            },
            async tokenOf(scope, key) {
              const row = (await q(client).query(`SELECT lock_version::text AS t FROM "${table}" ${where}`, [scope, key])).rows[0];
              return row ? Number(row.t) : undefined;
            },
            snapshot: async (scope, key) => (await q(client).query(`SELECT * FROM "${table}" ${where}`, [scope, key])).rows[0],
            count: async () => Number((await q(client).query(`SELECT count(*)::int AS n FROM "${table}"`)).rows[0]!.n),
            async sweepKey(scope, key) {
              if (!partitioned) {
                await harness.age(scope, key, 60 * 60_000);
                await harness.setLease(scope, key, -1000);
                return store.sweep({ retentionMs: 60_000 });
              }
              // Partitioned sweeps drop whole days: move the row alone into yesterday's partition.
              await q(client).query(`DELETE FROM "${table}" WHERE NOT (scope = $1 AND key = $2)`, [scope, key]);
              await q(client).query(
                `UPDATE "${table}" SET created_at = date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '1 hour',
                   locked_until = NULL ${where}`,
                [scope, key],
              );
              // Yesterday's partition is past a retention of 1 ms from 00:00:00.001 UTC on; a
              // longer retention would fail in the first minutes of a UTC day.
              return store.sweep({ retentionMs: 1 });
            },
            async drop() {
              await q(client).query(`DROP TABLE IF EXISTS "${side}"`);
              await q(client).query(`DROP TABLE IF EXISTS "${table}_blobs"`);
              await q(client).query(`DROP TABLE IF EXISTS "${table}"`);
              await q(client).query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
            },
          };
          return harness as StoreHarness;
        },
      };
    },
  };
}

/** The slice of MemoryStore's private state the backdoors reach (as SQL reaches a table). */
interface MemoryInternals {
  entries: Map<string, { createdAt: number; lockedUntil: number | null; token: number; scope: string; key: string }>;
}

/**
 * The memory store. Its effects push onto an array and register the matching removal with
 * `tx.onRollback`, the memory store's rollback (see MemoryTx): so the contract's "effects
 * rolled back when fenced" holds for it as for a database.
 */
export const memoryFactory: StoreFactory = {
  name: 'memory',
  capabilities: { sweep: 'rows', partitioned: false, sql: false },
  async connect() {
    return {
      close: async () => undefined,
      async fresh() {
        const store = new MemoryStore();
        const internals = store as unknown as MemoryInternals;
        const notes: Array<{ note: string }> = [];
        const entry = (scope: string, key: string) => [...internals.entries.values()].find((e) => e.scope === scope && e.key === key);
        const now = () => performance.timeOrigin + performance.now();
        const harness: StoreHarness<MemoryTx> = {
          store,
          sweep: (options) => store.sweep(options),
          effect: (note) => async (tx) => {
            const item = { note };
            notes.push(item);
            tx.onRollback(() => void notes.splice(notes.indexOf(item), 1));
            return { note };
          },
          effects: async () => notes.map((n) => n.note),
          async age(scope, key, ms) {
            const e = entry(scope, key);
            if (!e) return;
            e.createdAt -= ms;
            if (e.lockedUntil !== null) e.lockedUntil -= ms;
          },
          async setLease(scope, key, ms) {
            const e = entry(scope, key);
            if (e) e.lockedUntil = now() + ms;
          },
          tokenOf: async (scope, key) => entry(scope, key)?.token,
          snapshot: async (scope, key) => structuredClone(entry(scope, key)),
          count: async () => store.size,
          async sweepKey(scope, key) {
            await harness.age(scope, key, 60 * 60_000);
            await harness.setLease(scope, key, -1000);
            return store.sweep({ retentionMs: 60_000 });
          },
          drop: async () => undefined,
        };
        return harness as StoreHarness;
      },
    };
  },
};

const openPglite = async () => {
  const db = new PGlite();
  await db.waitReady;
  return { client: db as SqlClient, close: () => db.close() };
};
const openPostgres = async () => {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 20 });
  return { client: pool as SqlClient, close: () => pool.end() };
};

/** Every store, in the order the suites run them. Add a store here: one line. */
export const storeFactories: StoreFactory[] = [
  memoryFactory,
  postgresFactory('PostgresStore on PGlite', openPglite, false),
  postgresFactory('PostgresStore (partitioned) on PGlite', openPglite, true),
  ...(process.env.DATABASE_URL
    ? [
        postgresFactory('PostgresStore on PostgreSQL', openPostgres, false),
        postgresFactory('PostgresStore (partitioned) on PostgreSQL', openPostgres, true),
      ]
    : []),
  redisFactory,
  redisClusterFactory,
  redisPostgresPhasesFactory,
];

/**
 * Call inside a `describe`: connects to the factory's backend before its tests and closes it
 * after them, running registered cleanups first (last registered first, errors ignored).
 */
export function useStoreBackend(factory: StoreFactory): { backend(): StoreBackend; cleanup(fn: () => Promise<void>): void } {
  let backend: StoreBackend | undefined;
  const cleanups: Array<() => Promise<void>> = [];
  before(async () => {
    backend = await factory.connect();
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn().catch(() => undefined);
    await backend?.close();
  });
  return { backend: () => backend!, cleanup: (fn) => void cleanups.push(fn) };
}
