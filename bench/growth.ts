/**
 * (5a) Growth: claim and replay latency through the engine with 0, 1 M and 10 M rows in the
 * key table (quick mode: smaller sizes, said in the report). One table per size, filled with
 * generate_series in SQL; the sizes are measured in alternating rounds so drift hits all alike.
 * Replays pick keys at random over the whole table (cold pages included), one at a time
 * (concurrency 1: latency, not throughput).
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { IdempotencyEngine } from '../src/engine/engine.js';
import type { Queryable } from '../src/postgres/client.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { BenchConfig } from './lib/config.js';
import { uniqueTable } from './lib/config.js';
import { BODY, dropTable, fillDone, FINGERPRINT, HEADERS, keyTable, SCOPE, type Section } from './lib/fixtures.js';
import { fmtMs, interleave, type Stats } from './lib/measure.js';

const FILL_CHUNK = 1_000_000;

function latencies(samples: number[], elapsedS: number): Stats {
  const sorted = Float64Array.from(samples).sort();
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? NaN;
  return { opsPerSec: samples.length / elapsedS, p50Ms: at(0.5), p99Ms: at(0.99), ops: samples.length };
}

export async function growth(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const pool = new pg.Pool({ connectionString: cfg.databaseUrl, max: 2 });
  const tables = cfg.growthRows.map((rows) => ({ rows, table: uniqueTable(`growth${rows}`) }));
  const results: Array<{ rows: number; claim: Stats; replay: Stats; sizeMb: number }> = [];
  try {
    for (const { rows, table } of tables) {
      await keyTable(pool, table);
      for (let from = 1; from <= rows; from += FILL_CHUNK) {
        const count = Math.min(FILL_CHUNK, rows - from + 1);
        log(`  filling ${table}: ${(from - 1).toLocaleString('en-US')} → ${(from - 1 + count).toLocaleString('en-US')} rows`);
        await fillDone(pool, table, count, { from, withBody: false });
      }
      await pool.query(`ANALYZE "${table}"`);
    }
    const engines = tables.map(({ rows, table }) => ({
      rows,
      table,
      engine: new IdempotencyEngine<Queryable>({ store: new PostgresStore({ client: pool, table }) }),
    }));
    const created = new Map<string, string[]>(engines.map((e) => [e.table, []]));
    const claimRun = (e: (typeof engines)[number]) => async (): Promise<Stats> => {
      const samples: number[] = [];
      const start = performance.now();
      while (performance.now() - start < cfg.caseMs) {
        const key = randomUUID();
        const t0 = performance.now();
        const begun = await e.engine.begin({ scope: SCOPE, key, fingerprint: FINGERPRINT });
        samples.push(performance.now() - t0);
        if (begun.kind !== 'execute') throw new Error('growth: expected a claim');
        await begun.execution.finish({ status: 201, headers: HEADERS, body: BODY });
        created.get(e.table)!.push(key);
      }
      return latencies(samples, (performance.now() - start) / 1000);
    };
    const replayRun = (e: (typeof engines)[number]) => async (): Promise<Stats> => {
      const samples: number[] = [];
      const start = performance.now();
      const fresh = created.get(e.table)!;
      while (performance.now() - start < cfg.caseMs) {
        const key = e.rows > 0 ? `k${1 + Math.floor(Math.random() * e.rows)}` : fresh[Math.floor(Math.random() * fresh.length)]!;
        const t0 = performance.now();
        const begun = await e.engine.begin({ scope: SCOPE, key, fingerprint: FINGERPRINT });
        samples.push(performance.now() - t0);
        if (begun.kind !== 'replay') throw new Error(`growth: expected a replay, got ${begun.kind}`);
      }
      return latencies(samples, (performance.now() - start) / 1000);
    };
    log('  measuring claims');
    const claims = await interleave(Object.fromEntries(engines.map((e) => [String(e.rows), claimRun(e)])), cfg.rounds);
    log('  measuring replays');
    const replays = await interleave(Object.fromEntries(engines.map((e) => [String(e.rows), replayRun(e)])), cfg.rounds);
    for (const e of engines) {
      const size = await pool.query(`SELECT pg_total_relation_size($1::regclass) AS b`, [`"${e.table}"`]);
      results.push({ rows: e.rows, claim: claims[String(e.rows)]!, replay: replays[String(e.rows)]!, sizeMb: Number(size.rows[0].b) / 2 ** 20 });
    }
  } finally {
    for (const { table } of tables) await dropTable(pool, table);
    await pool.end();
  }
  const base = results[0]!;
  const lines = [
    `Engine on the PostgreSQL store, concurrency 1, ${cfg.rounds} rounds of ${cfg.caseMs} ms per size, sizes interleaved. ` +
      `Filler rows are finished keys with a 16-byte body, inserted with generate_series; replays pick a key at random over the whole table.` +
      (cfg.quick ? ` **Quick mode: sizes ${cfg.growthRows.map((n) => n.toLocaleString('en-US')).join(' / ')} instead of 0 / 1 M / 10 M.**` : ''),
    '',
    '| rows in table | table + indexes MB | claim p50 / p99 ms | replay p50 / p99 ms | claim p50 vs empty | replay p50 vs empty |',
    '|---:|---:|---:|---:|---:|---:|',
    ...results.map(
      (r) =>
        `| ${r.rows.toLocaleString('en-US')} | ${r.sizeMb.toFixed(0)} | ${fmtMs(r.claim.p50Ms)} / ${fmtMs(r.claim.p99Ms)} | ${fmtMs(r.replay.p50Ms)} / ${fmtMs(r.replay.p99Ms)} | ` +
        `${(r.claim.p50Ms / base.claim.p50Ms).toFixed(2)} | ${(r.replay.p50Ms / base.replay.p50Ms).toFixed(2)} |`,
    ),
    '',
    'A claim and a replay are each one primary-key lookup (a B-tree of depth 3-4 at these sizes), so their cost grows with the logarithm of the table at most; ' +
      'what grows with the table is the share of index and heap pages outside shared_buffers, i.e. the odds of a disk read on a random replay. ' +
      'The retention sweep keeps the table at about one day of keys.',
  ];
  const last = results.at(-1)!;
  return {
    title: 'Growth: latency as the key table grows',
    markdown: lines.join('\n'),
    headline: {
      [`replay p50 at ${last.rows.toLocaleString('en-US')} rows vs empty`]: (last.replay.p50Ms / base.replay.p50Ms).toFixed(2),
      [`claim p50 at ${last.rows.toLocaleString('en-US')} rows vs empty`]: (last.claim.p50Ms / base.claim.p50Ms).toFixed(2),
    },
  };
}
