/**
 * The library on each runtime (issue 42): idem against raw on PostgreSQL through `pg`, measured
 * inside Node 24 and inside Bun (bench/runtime-worker.ts, the same source on both), each with
 * its own alternating rounds, so every ratio compares two sides on one runtime. The runtimes
 * run one after the other (Node, Bun, then Bun, Node when rounds allow), never at once. Bun comes
 * from .ci/runtimes (`cd .ci/runtimes && npm ci`); without it the section says so.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';
import type { BenchConfig } from './lib/config.js';
import type { Section } from './lib/fixtures.js';
import { comparisonCells, ratio, type Sampled } from './lib/measure.js';

const run = promisify(execFile);
const BUN = '.ci/runtimes/node_modules/.bin/bun';

interface WorkerResult {
  runtime: string;
  fresh: { raw: Sampled; idem: Sampled };
  replay: { raw: Sampled; idem: Sampled };
}

export async function runtimesSection(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const env = {
    ...process.env,
    DATABASE_URL: cfg.databaseUrl,
    BENCH_CASE_MS: String(cfg.caseMs),
    BENCH_ROUNDS: String(cfg.rounds),
    BENCH_CONCURRENCY: '16',
  };
  const sides: Array<[string, string, string[]]> = [['node', process.execPath, ['--import', 'tsx', 'bench/runtime-worker.ts']]];
  if (existsSync(BUN)) sides.push(['bun', BUN, ['bench/runtime-worker.ts']]);
  const rows: string[] = [];
  const headline: Record<string, string> = {};
  for (const [name, bin, args] of sides) {
    log(`  runtimes: ${name}`);
    const { stdout } = await run(bin, args, { env, maxBuffer: 16 * 2 ** 20 });
    const result = JSON.parse(stdout.trim().split('\n').at(-1)!) as WorkerResult;
    for (const [what, pair] of [
      ['new request', result.fresh],
      ['replay', result.replay],
    ] as const) {
      const cells = comparisonCells(pair.raw, pair.idem);
      rows.push(`| ${result.runtime} | ${what} | ${cells.rates.join(' | ')} | ${cells.spread.join(' | ')} |`);
      headline[`${result.runtime.split(' ')[0]}, PostgreSQL, ${what}, c=16: idem / raw`] = ratio(pair.idem.opsPerSec, pair.raw.opsPerSec);
      log(`  ${result.runtime} ${what}: raw ${Math.round(pair.raw.opsPerSec)}/s, idem ${Math.round(pair.idem.opsPerSec)}/s`);
    }
  }
  const missing = existsSync(BUN) ? '' : '\n\nBun is not installed here (`cd .ci/runtimes && npm ci`), so only Node.js ran.';
  return {
    title: 'The library on Node.js 24 and Bun: idem against raw on the same runtime',
    markdown: [
      "PostgreSQL through `pg`, concurrency 16, the library-level sides of the first section (idem's own claim and finish statements against `engine.begin()` + `finish()`; one read against a replay), " +
        `each runtime in its own process with ${cfg.rounds} alternating rounds of ${cfg.caseMs} ms per side. Compare ratios within a row; rates across runtimes ran at different moments.${missing}`,
      '',
      '| runtime | case | raw ops/s | idem ops/s | **idem / raw** | raw p50 / p99 ms | idem p50 / p99 ms | noise raw / idem |',
      '|---|---|---:|---:|---:|---:|---:|---:|',
      ...rows,
    ].join('\n'),
    headline,
  };
}
