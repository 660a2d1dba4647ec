/**
 * idem on MySQL / MariaDB (`MySqlStore`) vs the same statements raw on the same mysql2 pool,
 * side by side in alternating rounds (issue 29 item 5). Skipped, with a note, when MYSQL_URL
 * (default mysql://root@127.0.0.1:3306/test) does not answer.
 *
 * new request: raw = the statements of `MySqlStore`'s new-key path, in its order, each on a
 *              connection of the pool: the read (the key is absent), the token draw, the claim
 *              insert, the fenced finish (1 KB body); idem = engine.begin() + finish() with
 *              the default heartbeat on.
 * replay:      raw = the read `MySqlStore` answers a finished key with; idem = engine.begin()
 *              on a finished key (the read, then the stored response decoded).
 * Both tables are made by `MySqlStore.migrate()`; the replay keys are finished through the store.
 */
import { randomUUID } from 'node:crypto';
import mysql, { type Pool, type ResultSetHeader, type RowDataPacket } from 'mysql2/promise';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { MySqlStore } from '../src/mysql/index.js';
import { mysqlStatements } from '../src/mysql/sql.js';
import { idemSide } from './library.js';
import type { BenchConfig } from './lib/config.js';
import { uniqueTable } from './lib/config.js';
import { BODY, FINGERPRINT, HEADERS, SCOPE, type Section } from './lib/fixtures.js';
import { closedLoop, comparisonCells, fmtNoise, fmtRate, interleave, ratio, type Sampled } from './lib/measure.js';

/** As bench/library.ts's `idemSide` reads them: `k1` … `k1000`. */
const REPLAY_KEYS = 1000;
const LEASE_US = 60_000_000;
const RETENTION_US = 86_400_000_000;

/** Why a missed row falls short (the report lists it under the targets). */
const WHY_NEW =
  'both sides send the same four statements (read, token draw, claim, fenced finish) on the same pool; what is left is idem in JavaScript per request ' +
  '(key checks, the engine, the lease heartbeat timer, the finish and its response encoding) and the store deadline on each statement, which counts where the two cores, shared with the server, are the limit.';
const WHY_REPLAY =
  'a replay is the same one read on both sides (one statement per replay, counted); idem’s own JavaScript per replay (the engine, the store, the row decoded into a key record, ' +
  'the deadline timers) is about 5-6 µs of node CPU with the database replaced by a canned row (bench/mysql-replay-cpu.ts canned). Under load at c = 16 a replay costs ' +
  'about 1.35 × the raw read’s node CPU, a checkout / query / release of the same read without idem about 1.06 ×, and idem without the deadline the same as with it: ' +
  'the rest is not a column, a conversion or a statement that could be cut (bench/notes.md, MySQL replay read), on two cores shared with the server. The replay cache answers replays with no statement at all.';

interface Row {
  concurrency: number;
  cases: Array<{ label: string; raw: Sampled; idem: Sampled }>;
}

/** The raw side: `MySqlStore`'s statements on a table of their own, with the values it binds. */
function rawSide(pool: Pool, table: string) {
  const sql = mysqlStatements(table);
  const scope = Buffer.from(SCOPE);
  const fingerprint = Buffer.from(FINGERPRINT);
  const headers = JSON.stringify(HEADERS);
  const body = Buffer.from(BODY);
  return {
    async newRequest(): Promise<void> {
      const key = Buffer.from(randomUUID());
      const [absent] = await pool.query<RowDataPacket[]>(sql.read, [RETENTION_US, RETENTION_US, scope, key]);
      if (absent.length !== 0) throw new Error('raw read found a new key');
      const [drawn] = await pool.query<ResultSetHeader>(sql.drawToken);
      const token = Number(drawn.insertId);
      const [claimed] = await pool.query<ResultSetHeader>(sql.claim, [scope, key, fingerprint, LEASE_US, token, randomUUID()]);
      if (claimed.affectedRows !== 1) throw new Error('raw claim did not claim');
      const [done] = await pool.query<ResultSetHeader>(sql.finish, [201, headers, body, null, null, scope, key, token]);
      if (done.affectedRows !== 1) throw new Error('raw finish matched no row');
    },
    async replay(i: number): Promise<void> {
      const [rows] = await pool.query<RowDataPacket[]>(sql.read, [RETENTION_US, RETENTION_US, scope, Buffer.from(`k${(i % REPLAY_KEYS) + 1}`)]);
      if (rows[0]?.state !== 'done') throw new Error('raw read found no finished row');
    },
  };
}

/** Finishes `k1` … `k<REPLAY_KEYS>` through the store, so both sides replay the same rows. */
async function fillDone(store: MySqlStore): Promise<void> {
  const engine = new IdempotencyEngine({ store });
  for (let i = 1; i <= REPLAY_KEYS; i += 50) {
    await Promise.all(
      Array.from({ length: Math.min(50, REPLAY_KEYS - i + 1) }, async (_, j) => {
        const begun = await engine.begin({ scope: SCOPE, key: `k${i + j}`, fingerprint: FINGERPRINT });
        if (begun.kind === 'execute') await begun.execution.finish({ status: 201, headers: HEADERS, body: BODY });
      }),
    );
  }
}

function table(rows: Row[]): string {
  const lines = [
    '| concurrency | case | raw ops/s | idem ops/s | idem / raw | raw p50 / p99 ms | idem p50 / p99 ms | noise raw / idem |',
    '|---:|---|---:|---:|---:|---:|---:|---:|',
  ];
  const cells = rows.flatMap((r) =>
    r.cases.map((c) => [String(r.concurrency), c.label, ...comparisonCells(c.raw, c.idem).rates, ...comparisonCells(c.raw, c.idem).spread]),
  );
  return [...lines, ...cells.map((row) => `| ${row.join(' | ')} |`)].join('\n');
}

/** MySQL / MariaDB through mysql2: idem vs the same statements raw on the same pool. */
export async function mysqlSection(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const title = 'MySQL / MariaDB: idem vs the same statements raw on mysql2 (library level)';
  const url = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
  try {
    const probe = await mysql.createConnection({ uri: url, connectTimeout: 3000 });
    await probe.end();
  } catch (error) {
    return { title, markdown: `Skipped: MYSQL_URL (${url.replace(/\/\/[^@]*@/, '//')}) did not answer: ${String((error as Error).message).split('\n')[0]}` };
  }
  const [idemTable, rawTable] = [uniqueTable('mysql_idem'), uniqueTable('mysql_raw')];
  const admin = mysql.createPool({ uri: url, connectionLimit: 4 });
  const stores = [idemTable, rawTable].map((t) => new MySqlStore({ client: admin, table: t }));
  const rows: Row[] = [];
  try {
    for (const store of stores) {
      await store.migrate();
      await fillDone(store);
    }
    for (const concurrency of cfg.concurrencies) {
      const pool = mysql.createPool({ uri: url, connectionLimit: concurrency });
      try {
        const engine = new IdempotencyEngine({ store: new MySqlStore({ client: pool, table: idemTable }) });
        const raw = rawSide(pool, rawTable);
        const idem = idemSide(engine);
        const loop = (op: (i: number) => Promise<void>) => () => closedLoop(op, concurrency, cfg.caseMs);
        for (const op of [raw.newRequest, idem.newRequest, raw.replay, idem.replay]) await closedLoop(op, concurrency, Math.max(100, cfg.warmupMs / 5));
        log(`  mysql c=${concurrency}: new requests`);
        const n = await interleave({ raw: loop(raw.newRequest), idem: loop(idem.newRequest) }, cfg.rounds);
        log(`  mysql c=${concurrency}: replays`);
        const r = await interleave({ raw: loop(raw.replay), idem: loop(idem.replay) }, cfg.rounds);
        rows.push({
          concurrency,
          cases: [
            { label: 'new request', raw: n.raw, idem: n.idem },
            { label: 'replay', raw: r.raw, idem: r.idem },
          ],
        });
      } finally {
        await pool.end();
      }
    }
  } finally {
    for (const store of stores) await store.dropTables().catch(() => undefined);
    await admin.end();
  }
  const targets: NonNullable<Section['targets']> = {};
  const headline: Record<string, string> = {};
  for (const r of rows) {
    const [n, p] = r.cases;
    targets[`mysql-new-${r.concurrency}`] = {
      value: n!.idem.opsPerSec / n!.raw.opsPerSec,
      detail: `c=${r.concurrency}: ${fmtRate(n!.idem.opsPerSec)} / ${fmtRate(n!.raw.opsPerSec)} ops/s, noise ${fmtNoise(n!.idem.noise)} / ${fmtNoise(n!.raw.noise)}`,
      whyMissed: WHY_NEW,
    };
    targets[`mysql-replay-${r.concurrency}`] = {
      value: p!.idem.opsPerSec / p!.raw.opsPerSec,
      detail: `c=${r.concurrency}: ${fmtRate(p!.idem.opsPerSec)} / ${fmtRate(p!.raw.opsPerSec)} ops/s, noise ${fmtNoise(p!.idem.noise)} / ${fmtNoise(p!.raw.noise)}`,
      whyMissed: WHY_REPLAY,
    };
    if (r.concurrency === 16) {
      headline['MySQL new request, idem / raw, c=16'] = ratio(n!.idem.opsPerSec, n!.raw.opsPerSec);
      headline['MySQL replay, idem / raw, c=16'] = ratio(p!.idem.opsPerSec, p!.raw.opsPerSec);
    }
  }
  return {
    title,
    markdown: `${table(rows)}\n\nServer: MariaDB or MySQL at MYSQL_URL; raw = \`MySqlStore\`'s own statements (src/mysql/sql.ts) in its order, one pool connection each.`,
    chart: {
      'idem new request (MySQL)': rows.map((r) => [r.concurrency, r.cases[0]!.idem.opsPerSec]),
      'idem replay (MySQL)': rows.map((r) => [r.concurrency, r.cases[1]!.idem.opsPerSec]),
    },
    headline,
    targets,
  };
}
