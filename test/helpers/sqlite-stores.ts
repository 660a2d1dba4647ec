/**
 * SqliteStore entries for the store factory list (test/helpers/stores.ts): one database file in a
 * directory of its own per backend (one `describe`), removed when it closes; each `fresh()` a new
 * table in it. The backdoors are SQL on the store's own connection (a second connection in this
 * process would wait on the file lock synchronously, blocking the event loop that must commit);
 * the business row of a phase is written with the client's own API on the phase's `tx`.
 *
 * node:sqlite always runs (built into Node 22.13+); better-sqlite3 and libSQL when their package
 * loads (better-sqlite3 is a native addon built for one Node ABI: another Node line skips it).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { SqliteStore, type SqliteClient } from '../../src/sqlite/index.js';
import { NOW } from '../../src/sqlite/sql.js';
import { tableName } from './engines.js';
import { toKeyRow } from './http.js';
import type { StoreFactory, StoreHarness } from './stores.js';

type Row = Record<string, unknown>;

/** One client on one file, with what the harness needs of it. */
export interface SqliteUnderTest {
  /** What the store gets. */
  client: SqliteClient;
  /** A statement on the client outside any phase; its rows (none for a write without RETURNING). */
  q(sql: string, params?: unknown[]): Promise<Row[]>;
  /** A statement on a phase's `tx`. */
  inTx(tx: unknown, sql: string, params?: unknown[]): Promise<void>;
  close(): Promise<void>;
}

interface SyncStatement {
  all(...params: unknown[]): unknown[];
  run(...params: unknown[]): unknown;
  /** better-sqlite3: whether the statement returns rows. */
  reader?: boolean;
}
interface SyncDb {
  prepare(sql: string): SyncStatement;
  exec(sql: string): unknown;
  close(): unknown;
}

/** A synchronous database (node:sqlite, better-sqlite3): statements prepared on it, `tx` is itself. */
function syncUnder(db: SyncDb): SqliteUnderTest {
  const run = (on: SyncDb, sql: string, params: unknown[]): Row[] => {
    const statement = on.prepare(sql);
    if (statement.reader === false) {
      statement.run(...params);
      return [];
    }
    return statement.all(...params) as Row[];
  };
  return {
    client: db as unknown as SqliteClient,
    q: async (sql, params = []) => run(db, sql, params),
    inTx: async (tx, sql, params = []) => void run(tx as SyncDb, sql, params),
    close: async () => void db.close(),
  };
}

const require = createRequire(import.meta.url);
const NODE_SQLITE: string = 'node:sqlite';

/** How each client under test opens a file, or why it cannot here. */
export const SQLITE_CLIENTS: Record<string, (file: string) => Promise<SqliteUnderTest>> = {
  'node:sqlite': async (file) => {
    // Named through a variable: @types/node 20 has no node:sqlite (Node 22.13+ has it built in).
    const { DatabaseSync } = (await import(NODE_SQLITE)) as { DatabaseSync: new (file: string) => SyncDb };
    return syncUnder(new DatabaseSync(file));
  },
  'better-sqlite3': async (file) => {
    const Database = require('better-sqlite3') as new (file: string) => SyncDb;
    return syncUnder(new Database(file));
  },
  'libSQL (file:)': async (file) => {
    const { createClient } = await import('@libsql/client');
    const client = createClient({ url: `file:${file}`, timeout: 5000 });
    const exec = async (on: { execute(s: { sql: string; args: unknown[] }): Promise<{ rows: ArrayLike<unknown> }> }, sql: string, params: unknown[]) =>
      Array.from((await on.execute({ sql, args: params })).rows) as Row[];
    return {
      client: client as unknown as SqliteClient,
      q: (sql, params = []) => exec(client as never, sql, params),
      inTx: async (tx, sql, params = []) => void (await exec(tx as never, sql, params)),
      close: async () => client.close(),
    };
  },
};

/** Whether `name`'s client loads here (better-sqlite3 needs its addon built for this Node). */
export async function sqliteClientLoads(name: string): Promise<string | undefined> {
  const dir = mkdtempSync(join(tmpdir(), 'idem-sqlite-probe-'));
  try {
    const under = await SQLITE_CLIENTS[name]!(join(dir, 'probe.db'));
    await under.close();
    return undefined;
  } catch (error) {
    return `${name} does not load here: ${(error as Error).message.split('\n')[0]}`;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A fresh directory with one database file; `remove` deletes it. */
export function scratchFile(): { dir: string; file: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'idem-sqlite-'));
  return { dir, file: join(dir, 'idem.db'), remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** The SQLite store on `clientName`'s client, on a file of its own, every `fresh()` a new table. */
export function sqliteFactory(clientName: string, contractOnly: boolean): StoreFactory {
  return {
    name: `SqliteStore on ${clientName}`,
    contractOnly,
    capabilities: { sweep: 'rows', partitioned: false, sql: false, virtualTime: false },
    async connect() {
      const scratch = scratchFile();
      const under = await SQLITE_CLIENTS[clientName]!(scratch.file);
      const q = under.q;
      return {
        async close() {
          await under.close();
          scratch.remove();
        },
        async fresh() {
          const table = tableName();
          const side = `${table}_side`;
          const store = new SqliteStore({ client: under.client, table });
          await store.migrate();
          await q(`CREATE TABLE "${side}" (id INTEGER PRIMARY KEY AUTOINCREMENT, note TEXT NOT NULL)`);
          const harness: StoreHarness<unknown> = {
            store: store as never,
            sweep: (o) => store.sweep(o),
            effect: (note) => async (tx) => {
              await under.inTx(tx, `INSERT INTO "${side}" (note) VALUES (?)`, [note]);
              return { note };
            },
            effects: async () => (await q(`SELECT note FROM "${side}" ORDER BY id`)).map((r) => String(r.note)),
            ...sqliteBackdoors(q, table, blobText),
            async staleInTx(tx, scope, key) {
              await under.inTx(tx, `UPDATE "${table}" SET lock_version = lock_version + 1 WHERE scope = ? AND key = ?`, [scope, key]);
            },
            async sweepKey(scope, key) {
              await harness.age(scope, key, 60 * 60_000);
              await harness.setLease(scope, key, -1000);
              return store.sweep({ retentionMs: 60_000 });
            },
            async drop() {
              await q(`DROP TABLE IF EXISTS "${side}"`);
              await store.dropTables();
            },
          };
          return harness as unknown as StoreHarness;
        },
      };
    },
  };
}

/**
 * The backdoors of a harness on a SQLite-dialect key table (SqliteStore's, D1Store's): SQL through
 * `q`, bytes as `blobText` makes them text.
 */
export function sqliteBackdoors(
  q: (sql: string, params?: unknown[]) => Promise<Row[]>,
  table: string,
  blobText: (key: string, value: unknown) => unknown,
): Pick<StoreHarness, 'age' | 'setLease' | 'tokenOf' | 'snapshot' | 'count' | 'dump' | 'rows'> {
  const where = 'WHERE scope = ? AND key = ?';
  return {
    async age(scope, key, ms) {
      await q(`UPDATE "${table}" SET created_at = created_at - ?, locked_until = locked_until - ? ${where}`, [ms, ms, scope, key]);
    },
    async setLease(scope, key, ms) {
      await q(`UPDATE "${table}" SET locked_until = ${NOW} + ? ${where}`, [ms, scope, key]);
    },
    async tokenOf(scope, key) {
      const row = (await q(`SELECT lock_version FROM "${table}" ${where}`, [scope, key]))[0];
      return row ? Number(row.lock_version) : undefined;
    },
    snapshot: async (scope, key) => {
      const row = (await q(`SELECT * FROM "${table}" ${where}`, [scope, key]))[0];
      return row ? JSON.parse(JSON.stringify({ ...row }, blobText)) : undefined;
    },
    count: async () => Number((await q(`SELECT COUNT(*) AS n FROM "${table}"`))[0]!.n),
    dump: async () => (await q(`SELECT * FROM "${table}"`)).map((row) => JSON.stringify({ ...row }, blobText)).join('\n'),
    rows: async () =>
      (
        await q(
          `SELECT scope, key, state, recovery_point, CAST(lock_version AS TEXT) AS lock_version, lower(hex(fingerprint)) AS fingerprint,
             response_status, CASE WHEN response_body IS NULL THEN NULL ELSE lower(hex(response_body)) END AS response_body, response_headers,
             (locked_until IS NOT NULL AND locked_until > ${NOW}) AS locked
           FROM "${table}" ORDER BY scope, key`,
        )
      ).map(toKeyRow),
  };
}

/** Bytes (Uint8Array, Buffer, libSQL's ArrayBuffer) as latin1 text, for `dump` and `snapshot`. */
function blobText(_key: string, value: unknown): unknown {
  if (value instanceof ArrayBuffer) return Buffer.from(value).toString('latin1');
  if (value instanceof Uint8Array) return Buffer.from(value).toString('latin1');
  if (value && typeof value === 'object' && (value as { type?: string }).type === 'Buffer') {
    return Buffer.from((value as { data: number[] }).data).toString('latin1');
  }
  return value;
}

/** The clients that load on this Node, probed once. */
const loading = await Promise.all(Object.keys(SQLITE_CLIENTS).map(async (name) => ({ name, reason: await sqliteClientLoads(name) })));
for (const { reason } of loading) if (reason) console.log(`# SqliteStore: ${reason}; its entry is skipped`);

/**
 * The SQLite entries: node:sqlite runs the engine and HTTP suites too (Hono in the adapter
 * contract); better-sqlite3 and libSQL the store contract, which is where the clients differ.
 */
export function sqliteFactories(): StoreFactory[] {
  return loading
    .filter(({ reason }) => !reason)
    .map(({ name }) => (name === 'node:sqlite' ? { ...sqliteFactory(name, false), adapterHarnesses: ['hono'] } : sqliteFactory(name, true)));
}
