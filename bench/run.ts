/**
 * The benchmark suite: `npm run bench` (full) or `npm run bench -- --quick` (under a minute,
 * smaller sizes, for development). Writes docs/benchmarks.md and docs/benchmarks-throughput.svg.
 * `--only=library,pglite,postgresjs,http,peers,redis,growth,memory,group-commit,dbos,cache,claim-path,wait,consumer,tools,mysql,gateway,runtimes,sqlite,dynamodb,citus` runs a subset and MERGES it into the existing report: the sections it
 * ran replace theirs, the others are kept as they were measured (each section says when, in
 * which mode and under which load it ran). The sections of a report are kept beside it in
 * `benchmarks.json`, from which the merged report is written. Quick runs (and runs with a
 * failed section) write bench/out/, full runs docs/. Not a test: CI never runs it and nothing
 * gates on speed.
 *
 * Needs PostgreSQL (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test) and Redis
 * (REDIS_URL, default redis://127.0.0.1:6379; the peers section is skipped with a note when
 * Redis is down). pgbench is used when installed (PGBENCH=/path overrides). The consumer section
 * uses RabbitMQ (AMQP_URL) and NATS (NATS_URL) and skips a broker that does not answer, with a note.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { lineChart } from './lib/chart.js';
import { type BenchConfig, config } from './lib/config.js';
import type { Section, TargetValue } from './lib/fixtures.js';
import { targetTable } from './lib/targets.js';

const cfg = config(process.argv.slice(2));
const only = process.argv
  .find((a) => a.startsWith('--only='))
  ?.slice(7)
  .split(',');
const started = performance.now();
const log = (line: string) => console.log(`[${((performance.now() - started) / 1000).toFixed(1).padStart(6)} s] ${line}`);

async function machine(): Promise<string> {
  const client = new pg.Client({ connectionString: cfg.databaseUrl });
  await client.connect();
  const version = (await client.query('SELECT version() AS v')).rows[0].v as string;
  const settings = (
    await client.query(`SELECT name, setting, unit FROM pg_settings WHERE name IN ('shared_buffers', 'synchronous_commit', 'fsync', 'max_connections')`)
  ).rows
    .map((r) => `${r.name}=${r.setting}${r.unit ? ` ${r.unit}` : ''}`)
    .join(', ');
  await client.end();
  let pgbenchVersion = 'not installed';
  try {
    pgbenchVersion = execFileSync(process.env.PGBENCH ?? 'pgbench', ['--version'])
      .toString()
      .trim();
  } catch {
    // reported as not installed
  }
  let redisVersion = 'unknown';
  try {
    redisVersion = execFileSync('redis-server', ['--version']).toString().trim();
  } catch {
    // reported as unknown
  }
  const cpus = os.cpus();
  return [
    `- OS: ${os.type()} ${os.release()} (${os.arch()})`,
    `- CPU: ${cpus.length} × ${cpus[0]?.model ?? 'unknown'}; memory ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB; load average at start ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' / ')}`,
    `- Node.js ${process.version}`,
    `- PostgreSQL: ${version} (${settings}), on the same machine over TCP 127.0.0.1`,
    `- pgbench: ${pgbenchVersion}`,
    `- Redis: ${redisVersion}`,
  ].join('\n');
}

/** A section as kept in benchmarks.json: what it measured, and when and how. */
interface RanSection {
  name: string;
  section: Section;
  ranAt: string;
  mode: 'quick' | 'full';
  loadAverage: string;
}
const loadAverage = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' / ');
const sections: RanSection[] = [];
/** Sections that threw: the run then exits 1 and leaves the published report alone. */
const failed: string[] = [];
const want = (name: string) => !only || only.includes(name);
const machineText = await machine();
log(`idem benchmark suite (${cfg.quick ? 'quick' : 'full'})`);

async function section(name: string, load: () => Promise<(cfg: BenchConfig, log: (l: string) => void) => Promise<Section>>) {
  if (!want(name)) return;
  log(`${name} …`);
  const ranAt = new Date().toISOString().slice(0, 16).replace('T', ' ');
  const at = { name, ranAt, mode: cfg.quick ? ('quick' as const) : ('full' as const), loadAverage: loadAverage() };
  try {
    sections.push({ ...at, section: await (await load())(cfg, log) });
  } catch (error) {
    failed.push(name);
    log(`${name} failed: ${(error as Error).stack ?? error}`);
    sections.push({
      ...at,
      section: { title: `${name}: failed`, markdown: `This section failed in this run: \`${String((error as Error).message ?? error).split('\n')[0]}\`` },
    });
  }
}

await section('library', async () => (await import('./library.js')).postgresLibrary);
await section('pglite', async () => (await import('./library.js')).pgliteLibrary);
await section('postgresjs', async () => (await import('./postgresjs.js')).postgresjs);
await section('http', async () => (await import('./http.js')).httpLevel);
await section('peers', async () => (await import('./peers.js')).peers);
await section('redis', async () => (await import('./redis-store.js')).redisStore);
await section('growth', async () => (await import('./growth.js')).growth);
await section('memory', async () => (await import('./memory.js')).memory);
await section('group-commit', async () => (await import('./group-commit.js')).groupCommit);
await section('dbos', async () => (await import('./dbos.js')).dbos);
await section('cache', async () => (await import('./replay-cache.js')).replayCache);
await section('claim-path', async () => (await import('./claim-path.js')).claimPath);
await section('wait', async () => (await import('./wait-mode.js')).waitMode);
await section('consumer', async () => (await import('./consumer.js')).consumers);
await section('tools', async () => (await import('./tool-calls.js')).toolCalls);
// MySQL / MariaDB at MYSQL_URL (default the local MariaDB); a note in the report when it does not answer.
await section('mysql', async () => (await import('./mysql.js')).mysqlSection);
// Citus: in a full run when CITUS_URL names a coordinator; with --only=citus a note says why it was skipped.
// idem gateway against the bare upstream and a plain undici proxy.
await section('gateway', async () => (await import('./gateway.js')).gatewaySection);
// The library inside Node 24 and inside Bun (bench/runtime-worker.ts on each).
await section('runtimes', async () => (await import('./runtimes.js')).runtimesSection);
// SQLite (better-sqlite3): SqliteStore against raw SQLite on the same pragmas.
await section('sqlite', async () => (await import('./sqlite.js')).sqliteSection);
// DynamoDB on dynalite (a child process): idem against raw conditional writes and Powertools.
await section('dynamodb', async () => (await import('./dynamodb.js')).dynamodbSection);
if (only?.includes('citus') || (!only && process.env.CITUS_URL)) await section('citus', async () => (await import('./citus.js')).citus);
const ORDER = [
  'library',
  'pglite',
  'postgresjs',
  'http',
  'peers',
  'redis',
  'growth',
  'memory',
  'group-commit',
  'dbos',
  'cache',
  'claim-path',
  'wait',
  'consumer',
  'tools',
  'mysql',
  'gateway',
  'runtimes',
  'sqlite',
  'dynamodb',
  'citus',
];

// Only a complete full run replaces the published report (docs/); a quick or failed run
// writes next to the suite, in bench/out/ (not committed).
const outDir = cfg.quick || failed.length > 0 ? 'bench/out' : 'docs';
await mkdir(outDir, { recursive: true });
const reportFile = `${outDir}/benchmarks.md`;
const chartFile = `${outDir}/benchmarks-throughput.svg`;
const dataFile = `${outDir}/benchmarks.json`;
// --only: merge into the sections kept from earlier runs (those not run now are kept).
let all = sections;
if (only) {
  const kept = JSON.parse(await readFile(dataFile, 'utf8').catch(() => '[]')) as RanSection[];
  const ran = new Set(sections.map((s) => s.name));
  all = [...kept.filter((s) => !ran.has(s.name)), ...sections];
  all.sort((a, b) => ORDER.indexOf(a.name) - ORDER.indexOf(b.name));
}
await writeFile(dataFile, `${JSON.stringify(all, null, 1)}\n`);
const chartSeries = Object.assign({}, ...all.map((s) => s.section.chart ?? {})) as Record<string, Array<[number, number]>>;
if (Object.keys(chartSeries).length > 0) {
  await writeFile(chartFile, lineChart('Throughput vs concurrency (same run)', chartSeries));
}
const headline = Object.assign({}, ...all.map((s) => s.section.headline ?? {})) as Record<string, string>;
const measured = Object.assign({}, ...all.map((s) => s.section.targets ?? {})) as Record<string, TargetValue>;
const elapsedS = ((performance.now() - started) / 1000).toFixed(0);
const merged = only && all.length > sections.length;
// Maintained prose (what the figures mean, why a ratio falls short): bench/notes.md.
const notes = await readFile('bench/notes.md', 'utf8').catch(() => '');
const provenance = (s: RanSection) => `_Measured ${s.ranAt} UTC, ${s.mode} mode, load average ${s.loadAverage} at the section's start._\n\n`;
const report = `# Benchmarks

Generated by \`npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}\` on ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC in ${elapsedS} s.${
  merged
    ? ` This run measured ${sections.map((s) => `\`${s.name}\``).join(', ')} and merged them into the report; every section says when it was measured.`
    : ''
}
${cfg.quick ? '\n> **Quick mode**: short rounds and small sizes (growth up to ' + cfg.growthRows.at(-1)!.toLocaleString('en-US') + ' rows, memory over ' + cfg.memoryKeys.toLocaleString('en-US') + ' keys). For development only; run `npm run bench` for the figures to publish.\n' : ''}
Every figure here is a **ratio of two sides measured in the same run on the same machine**, in
alternating rounds (A B, B A, …) so the drift of a shared machine hits both sides alike.
Absolute numbers are this machine's and move from run to run; the column *noise* is the spread
(max − min) / median of a side's per-round throughput in this run.

## Machine

${machineText}

## How to reproduce

\`\`\`sh
# PostgreSQL and Redis up (redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no)
DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379 npm run bench
npm run bench -- --quick                 # under a minute; writes bench/out/, not docs/
npm run bench -- --only=library,peers    # a subset, merged into the existing report
npm run bench -- --quick --only=library --concurrencies=1,16,64
node --import tsx bench/profile-http.ts  # CPU profiles of an HTTP replay (bench/out/profile/)
\`\`\`

## Targets (issues 18, 27, 28 and 29)

Each ratio is the two sides measured side by side in one section's run (the sections may come
from different runs when merged with \`--only\`: see each section's date).

${targetTable(measured, new Set(all.map((s) => s.name)))}

## Summary

| measure | value |
|---|---:|
${Object.entries(headline)
  .map(([k, v]) => `| ${k} | ${v} |`)
  .join('\n')}

${Object.keys(chartSeries).length > 0 ? `![Throughput vs concurrency](benchmarks-throughput.svg)\n\nDashed lines: raw statements and pgbench (the limit); solid lines: idem.\n` : ''}
${all.map((s) => `## ${s.section.title}\n\n${provenance(s)}${s.section.markdown}\n`).join('\n')}${notes ? `\n${notes}` : ''}`;
await writeFile(reportFile, report);
log(`wrote ${reportFile}${Object.keys(chartSeries).length > 0 ? ` and ${chartFile}` : ''}`);
if (failed.length > 0) log(`failed sections: ${failed.join(', ')} (exit 1; docs/benchmarks.md left as it was)`);
// Exit explicitly: a section that failed half-way can leave a pool or a server handle open.
process.exit(failed.length > 0 ? 1 : 0);
