/**
 * Closed-loop load and A/B interleaving. Every figure the suite reports is a ratio of two
 * sides measured in alternating rounds of the same run (A B A B …), so that the drift of a
 * shared machine hits both sides alike; the spread between rounds is reported as noise.
 */
import { performance } from 'node:perf_hooks';

/** One measured case: throughput in operations per second, latencies in ms. */
export interface Stats {
  opsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  ops: number;
}

/** The rounds of one side, and their summary. */
export interface Sampled extends Stats {
  /** ops/s of each round, in order. */
  rounds: number[];
  /** (max - min) / median of the rounds' ops/s: how much the machine moved during the run. */
  noise: number;
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

/**
 * Runs `op` from `concurrency` loops for `durationMs`; `op(i)` receives a global sequence
 * number. A failing op stops the run and rejects (a benchmark that errors measures nothing).
 */
export async function closedLoop(op: (i: number) => Promise<unknown>, concurrency: number, durationMs: number): Promise<Stats> {
  let next = 0;
  const latencies: number[] = [];
  const start = performance.now();
  const deadline = start + durationMs;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) {
        const t0 = performance.now();
        await op(next++);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const elapsed = (performance.now() - start) / 1000;
  const sorted = Float64Array.from(latencies).sort();
  return { opsPerSec: latencies.length / elapsed, p50Ms: percentile(sorted, 0.5), p99Ms: percentile(sorted, 0.99), ops: latencies.length };
}

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** Summarises rounds: median throughput and latencies, spread as noise. */
export function summarise(rounds: Stats[]): Sampled {
  const rates = rounds.map((r) => r.opsPerSec);
  const opsPerSec = median(rates);
  return {
    opsPerSec,
    p50Ms: median(rounds.map((r) => r.p50Ms)),
    p99Ms: median(rounds.map((r) => r.p99Ms)),
    ops: rounds.reduce((n, r) => n + r.ops, 0),
    rounds: rates,
    noise: opsPerSec > 0 ? (Math.max(...rates) - Math.min(...rates)) / opsPerSec : 0,
  };
}

/**
 * Runs every case once per round, in turn (A B C A B C …), and summarises each.
 * The order alternates between rounds (A B C, C B A) so no side always runs right after
 * the same other side.
 */
export async function interleave<K extends string>(cases: Record<K, () => Promise<Stats>>, rounds: number): Promise<Record<K, Sampled>> {
  const names = Object.keys(cases) as K[];
  const collected = Object.fromEntries(names.map((n) => [n, [] as Stats[]])) as unknown as Record<K, Stats[]>;
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? names : [...names].reverse();
    for (const name of order) collected[name].push(await cases[name]());
  }
  return Object.fromEntries(names.map((n) => [n, summarise(collected[n])])) as Record<K, Sampled>;
}

/** Ratio of two throughputs, 2 decimals. */
export function ratio(a: number, b: number): string {
  return b > 0 ? (a / b).toFixed(2) : 'n/a';
}

/** Formats a throughput (ops/s). */
export function fmtRate(n: number): string {
  return Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : 'n/a';
}

/** Formats a latency (ms). */
export function fmtMs(n: number): string {
  return Number.isFinite(n) ? (n < 10 ? n.toFixed(2) : n.toFixed(1)) : 'n/a';
}

/** Formats a noise fraction as a percentage. */
export function fmtNoise(n: number): string {
  return `${Math.round(n * 100)} %`;
}

/**
 * The cells of one raw-vs-idem comparison, in the order every side-by-side table shows them:
 * raw ops/s, idem ops/s, **idem / raw**, raw p50 / p99, idem p50 / p99, noise raw / idem.
 */
export function comparisonCells(raw: Sampled, idem: Sampled): { rates: string[]; spread: string[] } {
  return {
    rates: [fmtRate(raw.opsPerSec), fmtRate(idem.opsPerSec), `**${ratio(idem.opsPerSec, raw.opsPerSec)}**`],
    spread: [`${fmtMs(raw.p50Ms)} / ${fmtMs(raw.p99Ms)}`, `${fmtMs(idem.p50Ms)} / ${fmtMs(idem.p99Ms)}`, `${fmtNoise(raw.noise)} / ${fmtNoise(idem.noise)}`],
  };
}

/** A side of a library-level comparison: a new request, and a replay of finished key `i`. */
export interface LibrarySide {
  newRequest(): Promise<void>;
  replay(i: number): Promise<void>;
}

/**
 * Warms every side up, then measures its new requests and its replays at `concurrency`, each in
 * alternating rounds with the other sides: `{ 'new request': {…}, replay: {…} }`, per side.
 */
export async function newAndReplay<K extends string>(
  sides: Record<K, LibrarySide>,
  concurrency: number,
  cfg: { caseMs: number; rounds: number; warmupMs: number },
  log: (line: string) => void,
): Promise<Record<'new request' | 'replay', Record<K, Sampled>>> {
  const names = Object.keys(sides) as K[];
  const warm = Math.max(100, cfg.warmupMs / 5);
  for (const name of names) {
    await closedLoop(() => sides[name].newRequest(), concurrency, warm);
    await closedLoop((i) => sides[name].replay(i), concurrency, warm);
  }
  const measure = (op: (side: LibrarySide) => (i: number) => Promise<void>) =>
    interleave(
      Object.fromEntries(names.map((n) => [n, () => closedLoop(op(sides[n]), concurrency, cfg.caseMs)])) as Record<K, () => Promise<Stats>>,
      cfg.rounds,
    );
  log(`  c=${concurrency}: new requests`);
  const fresh = await measure((s) => () => s.newRequest());
  log(`  c=${concurrency}: replays`);
  const replay = await measure((s) => (i) => s.replay(i));
  return { 'new request': fresh, replay };
}
