/**
 * Group commit (protocol.md K19) against the per-request limit, on PostgreSQL through `pg`,
 * side by side in alternating rounds.
 *
 * new request: raw = idem's own claim statement + idem's own finish statement per request (two
 *              autocommit statements, two commits, named statements: the library section's raw
 *              side); idem = engine.begin() + finish() on a store with `groupCommit` (its
 *              defaults), and the same without it.
 * replay:      raw = one primary-key read; idem with group commit = engine.begin() on a
 *              finished key, which is answered by the batched claim's own read.
 * The sides share one pool of `concurrency` connections (they run in turn). The batch sizes are the store's
 * `onBatch` reports.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { IdempotencyEngine } from '../src/engine/engine.js';
import type { Queryable } from '../src/postgres/client.js';
import { type GroupBatch, PostgresStore } from '../src/postgres/index.js';
import { statements } from '../src/postgres/sql.js';
import type { BenchConfig } from './lib/config.js';
import { uniqueTable } from './lib/config.js';
import { BODY, dropTable, FINGERPRINT, fillDone, HEADERS, keyTable, SCOPE, type Section } from './lib/fixtures.js';
import { closedLoop, fmtMs, fmtNoise, fmtRate, interleave, ratio, type Sampled } from './lib/measure.js';

const REPLAY_KEYS = 1000;
const LEASE_MS = 60_000;
const RETENTION_MS = 86_400_000;

interface Row {
  concurrency: number;
  raw: Sampled;
  grouped: Sampled;
  plain: Sampled;
  rawRead: Sampled;
  groupedReplay: Sampled;
  claimBatch: number;
  finishBatch: number;
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);

export async function groupCommit(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const admin = new pg.Pool({ connectionString: cfg.databaseUrl, max: 1 });
  const rawTable = uniqueTable('gc_raw');
  const groupedTable = uniqueTable('gc_idem');
  const plainTable = uniqueTable('gc_plain');
  const concurrencies = cfg.quick ? [64] : [16, 64];
  const rows: Row[] = [];
  try {
    for (const t of [rawTable, groupedTable, plainTable]) {
      await keyTable(admin, t);
      await fillDone(admin, t, REPLAY_KEYS);
    }
    const sql = statements(rawTable);
    const readText = `SELECT state, fingerprint, response_status, response_headers, response_body FROM "${rawTable}" WHERE scope = $1 AND key = $2`;
    for (const concurrency of concurrencies) {
      // One pool for every side (they run in turn): three pools of 64 would pass max_connections.
      const pool = new pg.Pool({ connectionString: cfg.databaseUrl, max: concurrency });
      const [rawPool, groupedPool, plainPool] = [pool, pool, pool];
      try {
        const batches: GroupBatch[] = [];
        const grouped = new IdempotencyEngine<Queryable>({
          store: new PostgresStore({ client: groupedPool, table: groupedTable, groupCommit: { onBatch: (b) => batches.push(b) } }),
        });
        const plain = new IdempotencyEngine<Queryable>({ store: new PostgresStore({ client: plainPool, table: plainTable }) });
        const rawNew = async () => {
          const key = randomUUID();
          const { rows } = await rawPool.query({ name: 'gc_raw_claim', text: sql.claim, values: [SCOPE, key, FINGERPRINT, LEASE_MS, RETENTION_MS] });
          if (rows[0]?.kind !== 'claimed') throw new Error('raw claim did not claim');
          const done = await rawPool.query({
            name: 'gc_raw_finish',
            text: sql.finish,
            values: [SCOPE, key, rows[0].lock_version, 201, JSON.stringify(HEADERS), BODY, null, null],
          });
          if (done.rows.length !== 1) throw new Error('raw finish matched no row');
        };
        const rawRead = async (i: number) => {
          const { rows } = await rawPool.query({ name: 'gc_raw_read', text: readText, values: [SCOPE, `k${(i % REPLAY_KEYS) + 1}`] });
          if (rows[0]?.state !== 'done') throw new Error('raw read found no finished row');
        };
        const idemNew = (engine: IdempotencyEngine<Queryable>) => async () => {
          const begun = await engine.begin({ scope: SCOPE, key: randomUUID(), fingerprint: FINGERPRINT });
          if (begun.kind !== 'execute') throw new Error(`expected a claim, got ${begun.kind}`);
          await begun.execution.finish({ status: 201, headers: HEADERS, body: BODY });
        };
        const groupedReplay = async (i: number) => {
          const begun = await grouped.begin({ scope: SCOPE, key: `k${(i % REPLAY_KEYS) + 1}`, fingerprint: FINGERPRINT });
          if (begun.kind !== 'replay') throw new Error(`expected a replay, got ${begun.kind}`);
        };
        const loop = (op: (i: number) => Promise<void>) => () => closedLoop(op, concurrency, cfg.caseMs);
        const warm = Math.max(100, cfg.warmupMs / 5);
        for (const op of [rawNew, idemNew(grouped), idemNew(plain), rawRead, groupedReplay]) await closedLoop(op, concurrency, warm);
        batches.length = 0;
        log(`  group commit c=${concurrency}: new requests`);
        const n = await interleave({ raw: loop(rawNew), grouped: loop(idemNew(grouped)), plain: loop(idemNew(plain)) }, cfg.rounds);
        const claimBatch = mean(batches.filter((b) => b.kind === 'claim').map((b) => b.size));
        const finishBatch = mean(batches.filter((b) => b.kind === 'finish').map((b) => b.size));
        log(`  group commit c=${concurrency}: replays`);
        const r = await interleave({ raw: loop(rawRead), grouped: loop(groupedReplay) }, cfg.rounds);
        rows.push({ concurrency, raw: n.raw, grouped: n.grouped, plain: n.plain, rawRead: r.raw, groupedReplay: r.grouped, claimBatch, finishBatch });
      } finally {
        await pool.end();
      }
    }
  } finally {
    for (const t of [rawTable, groupedTable, plainTable]) await dropTable(admin, t);
    await admin.end();
  }
  const lines = [
    `PostgreSQL through \`pg\`, one pool of *concurrency* connections shared by the sides (they run in turn), ${cfg.rounds} alternating rounds of ${cfg.caseMs} ms per side. ` +
      "*raw*: idem's claim and finish statements issued per request (two commits each, the library section's raw side); " +
      '*group commit*: the engine on `PostgresStore({ groupCommit: {} })` (window 2 ms, at most 64 keys per batch); *idem*: the same engine without it. ' +
      "Replays with group commit are answered by the batched claim's own read. Batch sizes: the mean keys per claim and per finish statement (`onBatch`).",
    '',
    '| concurrency | case | raw ops/s | group commit ops/s | **group / raw** | idem (no group) ops/s | raw p50 / p99 ms | group p50 / p99 ms | idem p50 / p99 ms | keys per claim / finish batch | noise raw / group |',
    '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.concurrency} | new request | ${fmtRate(r.raw.opsPerSec)} | ${fmtRate(r.grouped.opsPerSec)} | **${ratio(r.grouped.opsPerSec, r.raw.opsPerSec)}** | ${fmtRate(r.plain.opsPerSec)} | ` +
        `${fmtMs(r.raw.p50Ms)} / ${fmtMs(r.raw.p99Ms)} | ${fmtMs(r.grouped.p50Ms)} / ${fmtMs(r.grouped.p99Ms)} | ${fmtMs(r.plain.p50Ms)} / ${fmtMs(r.plain.p99Ms)} | ` +
        `${r.claimBatch.toFixed(1)} / ${r.finishBatch.toFixed(1)} | ${fmtNoise(r.raw.noise)} / ${fmtNoise(r.grouped.noise)} |`,
      `| ${r.concurrency} | replay | ${fmtRate(r.rawRead.opsPerSec)} | ${fmtRate(r.groupedReplay.opsPerSec)} | **${ratio(r.groupedReplay.opsPerSec, r.rawRead.opsPerSec)}** | | ` +
        `${fmtMs(r.rawRead.p50Ms)} / ${fmtMs(r.rawRead.p99Ms)} | ${fmtMs(r.groupedReplay.p50Ms)} / ${fmtMs(r.groupedReplay.p99Ms)} | | | ${fmtNoise(r.rawRead.noise)} / ${fmtNoise(r.groupedReplay.noise)} |`,
    );
  }
  const at64 = rows.find((r) => r.concurrency === 64);
  return {
    title: 'Group commit vs the per-request limit (same run)',
    markdown: lines.join('\n'),
    targets: at64
      ? {
          'group-64': {
            value: at64.grouped.opsPerSec / at64.raw.opsPerSec,
            detail: `${fmtRate(at64.grouped.opsPerSec)} / ${fmtRate(at64.raw.opsPerSec)} ops/s; p99 ${fmtMs(at64.grouped.p99Ms)} / ${fmtMs(at64.raw.p99Ms)} ms; ${at64.claimBatch.toFixed(1)} keys per claim batch`,
            whyMissed:
              'fewer keys per batch than the concurrency (see the batch column): the window closed before the callers arrived, so the commits were shared less.',
          },
        }
      : undefined,
    headline: at64
      ? {
          'group commit new request / raw, c=64 (p99 ms group / raw)': `${ratio(at64.grouped.opsPerSec, at64.raw.opsPerSec)} (${fmtMs(at64.grouped.p99Ms)} / ${fmtMs(at64.raw.p99Ms)})`,
        }
      : {},
  };
}
