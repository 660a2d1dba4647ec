/**
 * Shared fixtures: the request every bench sends, key tables filled in SQL, pgbench runs.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { PostgresStore } from '../../src/postgres/index.js';
import type { Queryable, SqlClient } from '../../src/postgres/client.js';

/** The stored response of a new request: 201 with a 1 KB body (the "1 KB body"). */
export const BODY = new Uint8Array(1024).fill(120);
export const HEADERS: Array<[string, string]> = [['content-type', 'application/json']];
/** Every bench request has this fingerprint, so replays match. */
export const FINGERPRINT = new Uint8Array(32).fill(7);
export const SCOPE = 's';

/** A section of the report: a heading, its markdown, and the series it adds to the chart. */
export interface Section {
  title: string;
  markdown: string;
  /** Throughput by concurrency, for the chart: series name → [concurrency, ops/s][]. */
  chart?: Record<string, Array<[number, number]>>;
  /** Headline ratios, for the summary at the top. */
  headline?: Record<string, string>;
  /** Measured values of the report's targets (bench/lib/targets.ts), by target id. */
  targets?: Record<string, TargetValue>;
}

/** One measured target: the ratio, and what the report prints beside it. */
export interface TargetValue {
  /** The measured ratio (higher is better). */
  value: number;
  /** The two sides or extra figures (ops/s, p99), printed beside the ratio. */
  detail?: string;
  /** Why it falls short, when it does (from the profile; bench/notes.md has the long form). */
  whyMissed?: string;
}

/** Creates an idem table (the real migration) and returns its store. */
export async function keyTable(client: SqlClient, table: string): Promise<PostgresStore> {
  const store = new PostgresStore({ client, table });
  await store.migrate();
  return store;
}

/**
 * Fills `table` with `count` finished keys `k1…k<count>` in one INSERT … SELECT
 * generate_series (no round trip per row). `withBody` stores the 1 KB body; the growth
 * bench's filler rows are smaller so 10 M rows fit on a laptop disk.
 */
export async function fillDone(db: Queryable, table: string, count: number, options: { from?: number; withBody?: boolean } = {}): Promise<void> {
  if (count <= 0) return;
  const from = options.from ?? 1;
  await db.query(
    `INSERT INTO "${table}" (scope, key, fingerprint, state, recovery_point, response_status, response_headers, response_body, finished_at)
     SELECT $1, 'k' || g, $2, 'done', 'finished', 201, $3::jsonb, $4, now() FROM generate_series($5::int8, $6::int8) g`,
    [SCOPE, FINGERPRINT, JSON.stringify(HEADERS), options.withBody === false ? new Uint8Array(16) : BODY, from, from + count - 1],
  );
}

/** Drops a bench table (its blob table and token sequence go with it). */
export async function dropTable(db: Queryable, table: string): Promise<void> {
  await db.query(`DROP TABLE IF EXISTS "${table}_blobs"`);
  await db.query(`DROP TABLE IF EXISTS "${table}"`);
  await db.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
}

/** Result of one pgbench run. */
export interface PgbenchResult {
  tps: number;
  latencyAvgMs: number;
}

const run = promisify(execFile);

/** Path of pgbench, or undefined when it is not installed. */
export async function pgbenchPath(): Promise<string | undefined> {
  for (const candidate of [process.env.PGBENCH, '/usr/bin/pgbench', 'pgbench']) {
    if (!candidate) continue;
    try {
      await run(candidate, ['--version']);
      return candidate;
    } catch {
      // try the next
    }
  }
  return undefined;
}

/** Runs a custom pgbench script (`-M prepared`) written to a temp file; the file is removed after. */
export async function pgbench(bin: string, databaseUrl: string, script: string, clients: number, seconds: number): Promise<PgbenchResult> {
  const dir = await mkdtemp(join(tmpdir(), 'idem-pgbench-'));
  const file = join(dir, 'script.sql');
  await writeFile(file, script);
  try {
    const { stdout, stderr } = await run(
      bin,
      ['-n', '-M', 'prepared', '-c', String(clients), '-j', String(Math.min(clients, 2)), '-T', String(seconds), '-f', file, databaseUrl],
      { maxBuffer: 1 << 24 },
    );
    const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(stdout);
    const latency = /latency average = ([\d.]+) ms/.exec(stdout);
    if (!tps) throw new Error(`pgbench printed no tps: ${stderr.trim().split('\n').at(-1) ?? ''}`);
    return { tps: Number(tps[1]), latencyAvgMs: latency ? Number(latency[1]) : NaN };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Replaces `$n` parameters in a statement with pgbench expressions. */
export function inlineParams(text: string, params: Record<number, string>): string {
  return text.replace(/\$(\d+)/g, (match, n: string) => params[Number(n)] ?? match);
}
