/**
 * The D1 store (`D1Store`, idem/cloudflare) in the store list (stores.ts): one D1 database in
 * workerd through Miniflare per backend (one `describe`), `D1Store` in this process calling it
 * through Miniflare's binding proxy, as a Worker calls `env.DB`. Every `fresh()` is a new table
 * in it. The backdoors are SQL on the same database; a phase's effect is one INSERT the phase
 * adds to its `D1Tx` (run in the phase's batch); a takeover racing a commit is a write of its
 * own, committed at once (the commit's batch is sent whole after the effects: `sentWhole`).
 *
 * Miniflare is the runtime matrix's; without it, or outside IDEM_TEST_TIER=all, the entry is left out.
 */
import { D1Store, type D1DatabaseLike, type D1Tx } from '../../src/cloudflare/index.js';
import { miniflareMissing, startMiniflare } from './durable-object-stores.js';
import { tableName } from './engines.js';
import { sqliteBackdoors } from './sqlite-stores.js';
import type { StoreFactory, StoreHarness } from './stores.js';

type Row = Record<string, unknown>;

/** A Worker that only holds the D1 binding: the store runs in this process, on the binding's proxy. */
export const D1_WORKER = 'export default { fetch() { return new Response("idem d1 test worker") } }';

/** A statement's rows on `db`. */
export async function d1Rows(db: D1DatabaseLike, sql: string, params: unknown[] = []): Promise<Row[]> {
  const prepared = db.prepare(sql);
  return (await (params.length ? prepared.bind(...params) : prepared).all<Row>()).results;
}

/** D1 returns a BLOB as an array of byte values: as latin1 text, for `dump` and `snapshot`. */
const BLOBS = new Set(['fingerprint', 'response_body']);
function blobText(key: string, value: unknown): unknown {
  if (BLOBS.has(key) && Array.isArray(value)) return Buffer.from(value as number[]).toString('latin1');
  return value;
}

/** The harness of one fresh table of `db`. */
export async function d1Harness(db: D1DatabaseLike, options: { table?: string } = {}): Promise<StoreHarness<D1Tx>> {
  const table = options.table ?? tableName();
  const side = `${table}_side`;
  const store = new D1Store({ database: db, table });
  await store.migrate();
  const q = (sql: string, params: unknown[] = []) => d1Rows(db, sql, params);
  await q(`CREATE TABLE "${side}" (id INTEGER PRIMARY KEY AUTOINCREMENT, note TEXT NOT NULL)`);
  const where = 'WHERE scope = ? AND key = ?';
  const harness: StoreHarness<D1Tx> = {
    store,
    sweep: (o) => store.sweep(o),
    effect: (note) => async (tx) => {
      tx.write(tx.db.prepare(`INSERT INTO "${side}" (note) VALUES (?)`).bind(note));
      return { note };
    },
    effects: async () => (await q(`SELECT note FROM "${side}" ORDER BY id`)).map((r) => String(r.note)),
    ...sqliteBackdoors(q, table, blobText),
    // Another worker's takeover, committed at once on its own (D1 has no transaction to share).
    async staleInTx(_tx, scope, key) {
      await db.batch([
        db.prepare(`UPDATE "${table}_tokens" SET n = n + 1 WHERE id = 1`),
        db.prepare(`UPDATE "${table}" SET lock_version = (SELECT n FROM "${table}_tokens" WHERE id = 1) ${where}`).bind(scope, key),
      ]);
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
  return harness;
}

/** The D1 entry of stores.ts (store contract and attempt contract). */
export function d1Factories(): StoreFactory[] {
  if (miniflareMissing()) return [];
  return [
    {
      name: 'D1Store in Miniflare',
      contractOnly: true,
      capabilities: { sweep: 'rows', partitioned: false, sql: false, virtualTime: false, sentWhole: true },
      async connect() {
        const mf = await startMiniflare(D1_WORKER, {}, { d1Databases: ['DB'] });
        const db = await mf.getD1Database('DB');
        return { close: () => mf.dispose(), fresh: async () => (await d1Harness(db)) as unknown as StoreHarness };
      },
    },
  ];
}
