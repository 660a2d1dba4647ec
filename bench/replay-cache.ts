/**
 * (cache) The replay cache (protocol.md K20): heap per cached key, and replay throughput with
 * the cache against without it, side by side in one run on the same PostgreSQL table.
 *
 * Memory: `keys` finished records shaped as the PostgreSQL store returns them (a fresh
 * 32-byte fingerprint, a ~500 B body in its own buffer, one header, a claim id, a Date) go
 * into one cache; heapUsed + arrayBuffers after a full GC, before and after, divided by the
 * keys. Throughput: `engine.begin` replays of finished keys at each concurrency, idem without
 * a cache (one primary-key read each) against idem with a warm cache (no round trip).
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import v8 from 'node:v8';
import vm from 'node:vm';
import pg from 'pg';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { ReplayCache } from '../src/engine/replay-cache.js';
import type { KeyRecord } from '../src/store/types.js';
import type { BenchConfig } from './lib/config.js';
import { uniqueTable } from './lib/config.js';
import { dropTable, fillDone, FINGERPRINT, keyTable, SCOPE, type Section } from './lib/fixtures.js';
import { closedLoop, fmtMs, fmtNoise, fmtRate, interleave, ratio } from './lib/measure.js';

/** Replays of this many finished keys, round robin. */
const REPLAY_KEYS = 2_000;
const BODY_BYTES = 500;

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

function heap(): number {
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

/** A finished record as the PostgreSQL store hands it to the engine. */
function record(i: number): KeyRecord {
  const body = new Uint8Array(BODY_BYTES);
  body.fill(97 + (i % 26));
  return {
    scope: SCOPE,
    key: `key-${i.toString().padStart(8, '0')}-${'x'.repeat(24)}`,
    state: 'done',
    fingerprint: new Uint8Array(FINGERPRINT),
    recoveryPoint: 'finished',
    phaseResults: {},
    token: 1000 + i,
    claimId: Buffer.from(randomUUID()).toString('latin1'), // a flat string, as a driver decodes it
    leaseExpired: true,
    leaseRemainingMs: 0,
    createdAt: new Date(),
    response: { status: 201, headers: [['content-type', 'application/json']], body },
    retentionRemainingMs: 86_400_000,
  };
}

/** Heap per cached key over `keys` keys, and what the cache counted per key. */
function heapPerKey(keys: number): { perKey: number; counted: number; ms: number } {
  const cache = new ReplayCache({ maxBytes: 2 ** 40 });
  const before = heap();
  const t0 = performance.now();
  for (let i = 0; i < keys; i++) cache.fill(record(i), performance.now());
  const ms = performance.now() - t0;
  const afterFill = heap();
  const stats = cache.stats();
  if (stats.entries !== keys) throw new Error(`expected ${keys} entries, got ${stats.entries}`);
  const perKey = (afterFill - before) / keys;
  cache.clear();
  return { perKey, counted: stats.bytes / keys, ms };
}

export async function replayCache(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const keys = 100_000; // a fraction of a second to fill: the same in quick mode
  const mem = heapPerKey(keys);
  log(`  ${keys.toLocaleString('en-US')} keys of ${BODY_BYTES} B: ${mem.perKey.toFixed(0)} B of heap per key (counted ${mem.counted.toFixed(0)} B)`);

  const table = uniqueTable('cache');
  const admin = new pg.Pool({ connectionString: cfg.databaseUrl, max: 1 });
  const rows: string[] = [];
  const chart: Record<string, Array<[number, number]>> = { 'idem replay, no cache': [], 'idem replay, replay cache': [] };
  let headlineRatio = 'n/a';
  try {
    await keyTable(admin, table);
    await fillDone(admin, table, REPLAY_KEYS);
    for (const concurrency of cfg.concurrencies) {
      const pool = new pg.Pool({ connectionString: cfg.databaseUrl, max: concurrency });
      try {
        const store = await keyTable(pool, table);
        const plain = new IdempotencyEngine({ store });
        const cached = new IdempotencyEngine({ store, replayCache: new ReplayCache() });
        const replay = (engine: IdempotencyEngine) => async (i: number) => {
          const begun = await engine.begin({ scope: SCOPE, key: `k${(i % REPLAY_KEYS) + 1}`, fingerprint: FINGERPRINT });
          if (begun.kind !== 'replay') throw new Error(`expected a replay, got ${begun.kind}`);
        };
        // Warm-up fills the cache with every key (and the pool's prepared statements).
        for (let i = 0; i < REPLAY_KEYS; i++) await replay(cached)(i);
        await closedLoop(replay(plain), concurrency, Math.max(100, cfg.warmupMs / 5));
        const hitsBefore = cached.replayCache!.stats().hits;
        const r = await interleave(
          {
            plain: () => closedLoop(replay(plain), concurrency, cfg.caseMs),
            cached: () => closedLoop(replay(cached), concurrency, cfg.caseMs),
          },
          cfg.rounds,
        );
        const stats = cached.replayCache!.stats();
        const hitRate = (stats.hits - hitsBefore) / Math.max(1, r.cached.ops);
        chart['idem replay, no cache']!.push([concurrency, r.plain.opsPerSec]);
        chart['idem replay, replay cache']!.push([concurrency, r.cached.opsPerSec]);
        headlineRatio = ratio(r.cached.opsPerSec, r.plain.opsPerSec);
        rows.push(
          `| ${concurrency} | ${fmtRate(r.plain.opsPerSec)} | ${fmtMs(r.plain.p50Ms)} / ${fmtMs(r.plain.p99Ms)} | ${fmtRate(r.cached.opsPerSec)} | ` +
            `${fmtMs(r.cached.p50Ms)} / ${fmtMs(r.cached.p99Ms)} | **${ratio(r.cached.opsPerSec, r.plain.opsPerSec)}** | ${(hitRate * 100).toFixed(1)} % | ` +
            `${fmtNoise(Math.max(r.plain.noise, r.cached.noise))} |`,
        );
        log(
          `  c=${concurrency}: no cache ${fmtRate(r.plain.opsPerSec)}/s, cache ${fmtRate(r.cached.opsPerSec)}/s (${ratio(r.cached.opsPerSec, r.plain.opsPerSec)}x)`,
        );
      } finally {
        await pool.end();
      }
    }
  } finally {
    await dropTable(admin, table);
    await admin.end();
  }
  return {
    title: 'Replay cache: memory per key and replays without the database',
    markdown: [
      `**Memory.** ${keys.toLocaleString('en-US')} finished keys with a ${BODY_BYTES} B body, shaped as the PostgreSQL store reads them, in one ` +
        `\`ReplayCache\` (filled in ${mem.ms.toFixed(0)} ms): **${mem.perKey.toFixed(0)} B of heap per key** (heapUsed + arrayBuffers after a full GC), ` +
        `of which the cache counts ${mem.counted.toFixed(0)} B against \`maxBytes\`.`,
      '',
      `**Replays.** \`engine.begin\` on ${REPLAY_KEYS.toLocaleString('en-US')} finished keys (1 KB bodies) of one PostgreSQL table, round robin, ` +
        `without a cache (the replay fast path: one primary-key read) and with a warm \`replayCache\` (no round trip), alternating rounds of ${cfg.caseMs} ms.`,
      '',
      '| concurrency | no cache ops/s | p50 / p99 ms | replay cache ops/s | p50 / p99 ms | cache / no cache | hits | noise |',
      '|---:|---:|---:|---:|---:|---:|---:|---:|',
      ...rows,
    ].join('\n'),
    chart,
    headline: {
      'replay cache: heap per cached key of 500 B (bytes)': mem.perKey.toFixed(0),
      'replay cache: replays with / without cache (library, PostgreSQL)': headlineRatio,
    },
  };
}
