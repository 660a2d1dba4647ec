/**
 * The SQLite store against raw SQLite (issue 42), on better-sqlite3, two database files in one
 * temporary folder, both in WAL mode with the same pragmas, in alternating rounds of one run:
 *
 * raw:  the same durable work with no library: a new request is the claim (an INSERT of a
 *       started row with a token, in its own `BEGIN IMMEDIATE` transaction) and the finish (an
 *       UPDATE of that row with the 1 KB response, fenced on the token), two commits as idem
 *       makes them; a replay is one primary-key SELECT of the columns a replay needs.
 * idem: `engine.begin()` + `finish()` on `SqliteStore` (a new key), `engine.begin()` on a
 *       finished key (a replay).
 *
 * better-sqlite3 is synchronous: concurrency only queues the async side's turns, so c = 1 is the
 * comparison that counts and c = 16 shows what queueing costs.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { SqliteStore } from '../src/sqlite/index.js';
import type { BenchConfig } from './lib/config.js';
import { BODY, FINGERPRINT, HEADERS, SCOPE, type Section } from './lib/fixtures.js';
import { idemSide, REPLAY_KEYS, seedFinished } from './library.js';
import { comparisonCells, newAndReplay, ratio } from './lib/measure.js';

const HEADERS_JSON = JSON.stringify(HEADERS);

function rawSide(db: Database.Database) {
  db.exec(`CREATE TABLE keys (scope TEXT NOT NULL, key TEXT NOT NULL, fingerprint BLOB NOT NULL, state TEXT NOT NULL,
    lock_version INTEGER NOT NULL, locked_until INTEGER, response_status INTEGER, response_headers TEXT, response_body BLOB,
    created_at INTEGER NOT NULL, PRIMARY KEY (scope, key))`);
  const claim = db.prepare(`INSERT INTO keys (scope, key, fingerprint, state, lock_version, locked_until, created_at) VALUES (?, ?, ?, 'started', ?, ?, ?)`);
  const finish = db.prepare(
    `UPDATE keys SET state = 'done', response_status = ?, response_headers = ?, response_body = ?, locked_until = NULL
     WHERE scope = ? AND key = ? AND lock_version = ? AND state = 'started'`,
  );
  const read = db.prepare(`SELECT state, fingerprint, response_status, response_headers, response_body FROM keys WHERE scope = ? AND key = ?`);
  const claimTx = db.transaction((key: string, token: number, now: number) => claim.run(SCOPE, key, FINGERPRINT, token, now + 60_000, now));
  let token = 0;
  return {
    async newRequest(): Promise<void> {
      const key = randomUUID();
      const t = ++token;
      claimTx.immediate(key, t, Date.now());
      if (finish.run(201, HEADERS_JSON, BODY, SCOPE, key, t).changes !== 1) throw new Error('raw finish matched no row');
    },
    async replay(i: number): Promise<void> {
      const row = read.get(SCOPE, `k${(i % REPLAY_KEYS) + 1}`) as { state?: string } | undefined;
      if (row?.state !== 'done') throw new Error('raw replay found no finished row');
    },
    seed(i: number): void {
      claimTx.immediate(`k${i}`, ++token, Date.now());
      finish.run(201, HEADERS_JSON, BODY, SCOPE, `k${i}`, token);
    },
  };
}

export async function sqliteSection(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const dir = mkdtempSync(join(tmpdir(), 'idem-bench-sqlite-'));
  const open = (name: string) => {
    const db = new Database(join(dir, name));
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    return db;
  };
  const rawDb = open('raw.db');
  const idemDb = open('idem.db');
  const rows: string[] = [];
  const headline: Record<string, string> = {};
  try {
    const raw = rawSide(rawDb);
    const store = new SqliteStore({ client: idemDb, busyTimeoutMs: 5000 });
    await store.migrate();
    const engine = new IdempotencyEngine({ store });
    const idem = idemSide(engine);
    for (let i = 1; i <= REPLAY_KEYS; i++) raw.seed(i);
    await seedFinished(engine);
    for (const c of [1, 16]) {
      const measured = await newAndReplay({ raw, idem }, c, cfg, log);
      for (const what of ['new request', 'replay'] as const) {
        const r = measured[what];
        const cells = comparisonCells(r.raw, r.idem);
        rows.push(`| ${c} | ${what} | ${cells.rates.join(' | ')} | ${cells.spread.join(' | ')} |`);
        headline[`SQLite (better-sqlite3), ${what}, c=${c}: idem / raw`] = ratio(r.idem.opsPerSec, r.raw.opsPerSec);
        log(`  ${what} c=${c}: raw ${Math.round(r.raw.opsPerSec)}/s, idem ${Math.round(r.idem.opsPerSec)}/s (${ratio(r.idem.opsPerSec, r.raw.opsPerSec)})`);
      }
    }
  } finally {
    rawDb.close();
    idemDb.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return {
    title: 'SQLite store against raw SQLite (better-sqlite3)',
    markdown: [
      'Two database files, WAL and `synchronous = NORMAL` on both. raw: the claim INSERT in its own `BEGIN IMMEDIATE` and the token-fenced finish UPDATE (two commits, as idem makes them), one primary-key SELECT per replay. ' +
        "idem: `SqliteStore` through the engine. better-sqlite3 is synchronous, so c = 1 is the comparison; c = 16 adds the async side's queueing. " +
        `${cfg.rounds} alternating rounds of ${cfg.caseMs} ms per side.`,
      '',
      '| concurrency | case | raw ops/s | idem ops/s | **idem / raw** | raw p50 / p99 ms | idem p50 / p99 ms | noise raw / idem |',
      '|---:|---|---:|---:|---:|---:|---:|---:|',
      ...rows,
    ].join('\n'),
    headline,
  };
}
