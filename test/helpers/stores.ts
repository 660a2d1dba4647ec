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
import { pglite } from './pglite.js';
import pg from 'pg';
import postgres from 'postgres';
import { PostgresStore, type PostgresStoreOptions } from '../../src/postgres/index.js';
import type { Queryable, SqlClient, SqlDriver } from '../../src/postgres/client.js';
import { postgresjs } from '../../src/postgresjs/index.js';
import { MemoryStore, type MemoryTx } from '../../src/memory/index.js';
import type { IdempotencyStore } from '../../src/store/types.js';
import { tableName } from './engines.js';
import { keyRows, type KeyRow } from './http.js';
import { redisClusterFactory, redisFactory, redisGlideClusterFactory, redisGlideFactory, redisPostgresPhasesFactory } from './redis-stores.js';
import { citusFactories } from './citus-stores.js';
import { ormStoreFactories } from './orm-stores.js';
import { drizzleFactories } from './drizzle-stores.js';
import { mysqlFactories } from './mysql-stores.js';
import { sqliteFactories } from './sqlite-stores.js';
import { durableObjectFactories } from './durable-object-stores.js';
import { d1Factories } from './d1-stores.js';

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
  /** The store is a database server (PostgreSQL, MySQL) reached over connections: the store-unavailable tests close them. */
  sql: boolean;
  /**
   * The store's clock is `Date.now()` and it uses no timers or I/O: suites run it on
   * node:test mock timers (test/helpers/wait.ts `virtualTime`), so lease waits take no time.
   */
  virtualTime: boolean;
  /**
   * `true`: a commit's transaction is sent whole once its effects returned (DynamoDbStore's
   * `TransactWriteItems`), so a write that races it is another client's, committed on its own:
   * it fences the commit but cannot roll back with it (there is no open transaction to share).
   */
  sentWhole?: true;
  /**
   * `false`: a commit records its result AFTER the effects, never in one transaction with them
   * (RedisStore without PostgresPhases: `NoTransaction`), so a fenced or failed commit does
   * not undo effects that already ran; the contract checks that nothing is recorded instead.
   * @default true
   */
  atomicEffects?: false;
  /**
   * `false`: `operate` refuses `forget` (RedisStore + PostgresPhases: the ledger keeps the
   * response, protocol.md K22). A forced release fences the old holder only once the key is
   * taken over (its phases commit against the ledger's token).
   * @default true
   */
  forget?: false;
  /**
   * `false`: the store does not declare `completion` (DurableObjectStore: its objects cannot be
   * listed, so no `listAbandoned`); the contract skips the completer's part.
   * @default true
   */
  completion?: false;
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
   * Called inside a commit's effects with its `tx`: makes the key's token stale as another
   * worker's takeover would, so the commit's fenced write must fail.
   */
  staleInTx(tx: Tx, scope: string, key: string): Promise<void>;
  /** Every stored byte and string of the store as text, to check a secret is never stored. */
  dump(): Promise<string>;
  /** Every stored key as the HTTP suites inspect it, ordered by scope and key. */
  rows(): Promise<KeyRow[]>;
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
  /**
   * Run only the store contract on this store, not the engine and HTTP suites: for a mode whose
   * store behaviour differs but whose engine and HTTP behaviour another entry already covers
   * at a fraction of the time (see {@link suiteStores}).
   */
  contractOnly?: boolean;
  /**
   * The store changes how an HTTP adapter behaves, so the adapter contract runs every harness on
   * it in the full matrix: the memory store (virtual time, no transaction), PGlite (one
   * connection, in process), a PostgreSQL server (a pool, real concurrency) and Redis with
   * PostgreSQL phases (claims and results apart from the effects). The other suite stores are
   * another driver or mode of one of these: the web core alone runs the adapter contract on them
   * (test/helpers/adapter-run.ts; docs/architecture.md, "What each suite proves").
   */
  adapterMatrix?: boolean;
  /**
   * Harnesses (by name) the adapter contract runs on this store in the full matrix besides the
   * web core, for a store outside {@link adapterMatrix} whose own HTTP behaviour is proven on a
   * few frameworks (MySQL: Hono and Express).
   */
  adapterHarnesses?: string[];
  connect(): Promise<StoreBackend>;
}

/**
 * A PostgreSQL database through one client: what the store is given, SQL for the backdoors,
 * and the client's own way to write a business row inside a phase's transaction.
 * @typeParam Tx the client's transaction object (a phase's `tx`)
 */
export interface PostgresClient<Tx> {
  /** What `PostgresStore` gets as `client`. */
  client: SqlClient | SqlDriver<Tx>;
  /** The pg.Pool or PGlite itself, for suites that build stores with other options. */
  raw?: SqlClient;
  /** Autocommit SQL on the same database, for the backdoors. */
  sql: Queryable;
  /** Inserts `note` into the table `side` through the client's own API on `tx`. */
  insert(tx: Tx, side: string, note: string): Promise<void>;
  /** Runs a statement on `tx` ($1… placeholders), for the backdoor that acts inside a commit. */
  inTx(tx: Tx, text: string, params: unknown[]): Promise<unknown>;
  close(): Promise<void>;
}

/** pg.Pool and PGlite: the store gets the client, a phase's `tx` is the connection (a Queryable). */
const queryableClient = (client: SqlClient, close: () => Promise<void>): PostgresClient<Queryable> => ({
  client,
  raw: client,
  sql: client,
  insert: async (tx, side, note) => void (await tx.query(`INSERT INTO "${side}" (note) VALUES ($1)`, [note])),
  inTx: (tx, text, params) => tx.query(text, params),
  close,
});

/**
 * The PostgreSQL store on `open()`'s client; every `fresh()` a new table, handed to `prepare`
 * after `migrate()` (Citus: distribute it).
 */
export function postgresFactory<Tx>(
  name: string,
  open: () => Promise<PostgresClient<Tx>>,
  partitioned: boolean,
  contractOnly = false,
  options: Partial<PostgresStoreOptions<Tx>> = {},
  prepare?: (store: PostgresStore<Tx>) => Promise<unknown>,
  adapterMatrix = false,
): StoreFactory {
  return {
    name,
    contractOnly,
    adapterMatrix,
    capabilities: { sweep: partitioned ? 'partitions' : 'rows', partitioned, sql: true, virtualTime: false },
    async connect() {
      const db = await open();
      const client = db.sql;
      return {
        ...(db.raw && { client: db.raw }),
        close: () => db.close(),
        async fresh() {
          const table = tableName();
          const side = `${table}_side`;
          const store = new PostgresStore<Tx>({ ...options, client: db.client as PostgresStoreOptions<Tx>['client'], table, partitioned });
          await store.migrate();
          await prepare?.(store);
          await client.query(`CREATE TABLE "${side}" (id serial PRIMARY KEY, note text NOT NULL)`);
          const where = `WHERE scope = $1 AND key = $2`;
          const harness: StoreHarness<Tx> = {
            store,
            sweep: (options) => store.sweep(options),
            effect: (note) => async (tx) => {
              await db.insert(tx, side, note);
              return { note };
            },
            effects: async () => (await client.query(`SELECT note FROM "${side}" ORDER BY id`)).rows.map((r) => String(r.note)),
            async age(scope, key, ms) {
              // Through UTC timestamps: `timestamptz - interval` is STABLE (it depends on the
              // session's time zone), and Citus refuses a STABLE function of a column in an UPDATE.
              const back = (column: string) => `((${column} AT TIME ZONE 'UTC') - $3::int8 * interval '1 millisecond') AT TIME ZONE 'UTC'`;
              await client.query(
                `UPDATE "${table}" SET created_at = ${back('created_at')},
                   locked_until = ${back('locked_until')} ${where}`,
                [scope, key, ms],
              );
            },
            async setLease(scope, key, ms) {
              await client.query(`UPDATE "${table}" SET locked_until = now() + $3::int8 * interval '1 millisecond' ${where}`, [scope, key, ms]);
            },
            async tokenOf(scope, key) {
              const row = (await client.query(`SELECT lock_version::text AS t FROM "${table}" ${where}`, [scope, key])).rows[0];
              return row ? Number(row.t) : undefined;
            },
            snapshot: async (scope, key) => (await client.query(`SELECT * FROM "${table}" ${where}`, [scope, key])).rows[0],
            count: async () => Number((await client.query(`SELECT count(*)::int AS n FROM "${table}"`)).rows[0]!.n),
            async staleInTx(tx, scope, key) {
              await db.inTx(tx, `UPDATE "${table}" SET lock_version = lock_version + 1 ${where}`, [scope, key]);
            },
            dump: async () => (await client.query(`SELECT k::text AS row FROM "${table}" AS k`)).rows.map((r) => String(r.row)).join('\n'),
            rows: () => keyRows(client, table),
            async sweepKey(scope, key) {
              if (!partitioned) {
                await harness.age(scope, key, 60 * 60_000);
                await harness.setLease(scope, key, -1000);
                return store.sweep({ retentionMs: 60_000 });
              }
              // Partitioned sweeps drop whole days: move the row alone into yesterday's partition.
              await client.query(`DELETE FROM "${table}" WHERE NOT (scope = $1 AND key = $2)`, [scope, key]);
              await client.query(
                `UPDATE "${table}" SET created_at = date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '1 hour',
                   locked_until = NULL ${where}`,
                [scope, key],
              );
              // Yesterday's partition is past a retention of 1 ms from 00:00:00.001 UTC on; a
              // longer retention would fail in the first minutes of a UTC day.
              return store.sweep({ retentionMs: 1 });
            },
            async drop() {
              await client.query(`DROP TABLE IF EXISTS "${side}"`);
              await client.query(`DROP TABLE IF EXISTS "${table}_blobs"`);
              await client.query(`DROP TABLE IF EXISTS "${table}"`);
              await client.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
            },
          };
          return harness as unknown as StoreHarness;
        },
      };
    },
  };
}

/** The slice of MemoryStore's private state the backdoors reach (as SQL reaches a table). */
interface MemoryInternals {
  entries: Map<
    string,
    {
      scope: string;
      key: string;
      state: string;
      createdAt: number;
      lockedUntil: number | null;
      token: number;
      recoveryPoint: string;
      fingerprint: Uint8Array;
      response?: { status: number; headers: Array<[string, string]>; body: Uint8Array };
    }
  >;
  lastToken: number;
}

/**
 * The memory store. Its effects push onto an array and register the matching removal with
 * `tx.onRollback`, the memory store's rollback (see MemoryTx): so the contract's "effects
 * rolled back when fenced" holds for it as for a database.
 */
export const memoryFactory: StoreFactory = memoryStoreFactory('memory', true);

/**
 * The memory store on its default clock (real, monotonic time: no virtual time), the one
 * clock a replay cache can bound its entries by (protocol.md K20); not in {@link storeFactories}.
 */
export const memoryRealClockFactory: StoreFactory = memoryStoreFactory('memory (real clock)', false);

function memoryStoreFactory(name: string, virtualTime: boolean): StoreFactory {
  return {
    name,
    adapterMatrix: virtualTime,
    capabilities: { sweep: 'rows', partitioned: false, sql: false, virtualTime },
    async connect() {
      return {
        close: async () => undefined,
        async fresh() {
          // Date.now(): node:test mock timers move it (virtualTime). Else the store's default clock.
          const now = virtualTime ? () => Date.now() : () => performance.timeOrigin + performance.now();
          const store = virtualTime ? new MemoryStore({ clock: now }) : new MemoryStore();
          const internals = store as unknown as MemoryInternals;
          const notes: Array<{ note: string }> = [];
          const entry = (scope: string, key: string) => [...internals.entries.values()].find((e) => e.scope === scope && e.key === key);
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
            async staleInTx(tx, scope, key) {
              const e = entry(scope, key);
              if (!e) return;
              const held = e.token;
              e.token = ++internals.lastToken; // as a takeover draws it
              tx.onRollback(() => {
                e.token = held; // part of the commit, as in a database transaction
              });
            },
            dump: async () =>
              [...internals.entries.values()]
                .map((e) => JSON.stringify(e, (_k, v: unknown) => (v instanceof Uint8Array ? Buffer.from(v).toString('latin1') : v)))
                .join('\n'),
            rows: async () => {
              const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
              const key = (r: { scope: string; key: string }) => `${r.scope}\u0000${r.key}`;
              return [...internals.entries.values()]
                .sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0))
                .map((e) => ({
                  scope: e.scope,
                  key: e.key,
                  state: e.state,
                  recovery_point: e.recoveryPoint,
                  lock_version: String(e.token),
                  fingerprint: hex(e.fingerprint),
                  response_status: e.response?.status ?? null,
                  response_body: e.response ? hex(e.response.body) : null,
                  response_headers: e.response?.headers ?? null,
                  locked: e.lockedUntil !== null && e.lockedUntil > now(),
                }));
            },
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
}

const openPglite = async () => {
  const db = pglite();
  await db.waitReady;
  return queryableClient(db as SqlClient, () => db.close());
};
const openPostgres = async () => {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 20 });
  return queryableClient(pool as SqlClient, () => pool.end());
};
/**
 * postgres.js (the `postgres` package) on real PostgreSQL: it speaks the wire protocol over a
 * socket, so it cannot run on PGlite (in-process, no server). The business row is written with
 * postgres.js's own tagged template on the phase's `tx` (the `sql` of `sql.begin`).
 */
const openPostgresJs = async (): Promise<PostgresClient<postgres.TransactionSql>> => {
  const sql = postgres(process.env.DATABASE_URL!, { max: 20, onnotice: () => undefined });
  const driver = postgresjs(sql);
  return {
    client: driver,
    sql: driver,
    insert: async (tx, side, note) => void (await tx`INSERT INTO ${tx(side)} (note) VALUES (${note})`),
    inTx: (tx, text, params) => tx.unsafe(text, params as string[]),
    close: () => sql.end({ timeout: 5 }),
  };
};

/**
 * Every store, in the order the suites run them. Add a store here: one line. With
 * `IDEM_TEST_TIER=fast` (`npm run test:fast`) only the stores on virtual time run.
 */
export const storeFactories: StoreFactory[] = [
  memoryFactory,
  postgresFactory('PostgresStore on PGlite', openPglite, false, false, {}, undefined, true),
  // PGlite runs one query at a time and a partitioned claim is a transaction holding an advisory
  // lock: the engine and HTTP suites on it took over 3 minutes on a busy two-core machine and
  // cover nothing the partitioned PostgreSQL entry does not.
  postgresFactory('PostgresStore (partitioned) on PGlite', openPglite, true, true),
  // Group commit (protocol.md K19) changes only how claims and finishes reach the table: the
  // contract alone covers it (test/group-commit.test.ts has its batch-specific cases).
  postgresFactory('PostgresStore (group commit) on PGlite', openPglite, false, true, { groupCommit: true }),
  ...(process.env.DATABASE_URL
    ? [
        postgresFactory('PostgresStore on PostgreSQL', openPostgres, false, false, {}, undefined, true),
        postgresFactory('PostgresStore (partitioned) on PostgreSQL', openPostgres, true),
        postgresFactory('PostgresStore (group commit) on PostgreSQL', openPostgres, false, true, { groupCommit: true }),
        postgresFactory('PostgresStore on postgres.js', openPostgresJs, false),
        // Group commit's batched statements bind their batch as one json parameter, and a
        // partitioned claim is a transaction of idem's own through the driver: the contract on both.
        postgresFactory('PostgresStore (group commit) on postgres.js', openPostgresJs, false, true, { groupCommit: true }),
        postgresFactory('PostgresStore (partitioned) on postgres.js', openPostgresJs, true, true),
      ]
    : []),
  // Kysely (PGlite; with DATABASE_URL PostgreSQL) and Prisma (PostgreSQL), test/helpers/orm-stores.ts.
  ...ormStoreFactories(postgresFactory),
  // Drizzle on PGlite, node-postgres and postgres.js: test/helpers/drizzle-stores.ts.
  ...drizzleFactories(),
  // The Redis stores run when REDIS_URL is set (as .ci/run does), like PostgreSQL with DATABASE_URL.
  ...(process.env.REDIS_URL
    ? [redisFactory, redisClusterFactory, redisGlideFactory, redisGlideClusterFactory, { ...redisPostgresPhasesFactory, adapterMatrix: true }]
    : []),
  // Citus (tables distributed by scope) when CITUS_URL is set: test/helpers/citus-stores.ts.
  ...citusFactories(postgresFactory),
  // MySqlStore on MariaDB or MySQL when MYSQL_URL is set: test/helpers/mysql-stores.ts.
  ...mysqlFactories(),
  // SqliteStore on node:sqlite, better-sqlite3 and libSQL, each on a file: test/helpers/sqlite-stores.ts.
  ...sqliteFactories(),
  // DurableObjectStore in Miniflare (workerd), in the full tier: test/helpers/durable-object-stores.ts.
  ...durableObjectFactories(),
  ...d1Factories(),
].filter((factory) => process.env.IDEM_TEST_TIER !== 'fast' || factory.capabilities.virtualTime);

/** The stores the engine and HTTP adapter suites run over: {@link storeFactories} but the contract-only ones. */
export const suiteStores: StoreFactory[] = storeFactories.filter((factory) => !factory.contractOnly);

/**
 * Call inside a `describe`: connects to the factory's backend before its tests and closes it
 * after them, running registered cleanups first (last registered first, errors ignored).
 */
export function useStoreBackend(factory: StoreFactory): {
  backend(): StoreBackend;
  cleanup(fn: () => Promise<void>): void;
  /** Closes the backend now (once; `after` then skips it): for tests of a store gone away. */
  close(): Promise<void>;
} {
  let backend: StoreBackend | undefined;
  let closing: Promise<void> | undefined;
  const cleanups: Array<() => Promise<void>> = [];
  const close = () => (closing ??= backend ? backend.close() : Promise.resolve());
  before(async () => {
    backend = await factory.connect();
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn().catch(() => undefined);
    await close();
  });
  return { backend: () => backend!, cleanup: (fn) => void cleanups.push(fn), close };
}
