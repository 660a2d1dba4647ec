/**
 * Profiling aid (not part of the suite): where a replay's time goes between the socket and the
 * response. Runs the bench server (bench/lib/server.ts) under `node --cpu-prof` for the bare
 * handler and for replays behind idem, drives it with autocannon, and writes per case
 * `bench/out/profile/<framework>-<case>.cpuprofile` (open in Chrome DevTools or speedscope),
 * `.folded` (folded stacks for flamegraph.pl / inferno) and one summary,
 * `bench/out/profile/http.md` (self time per layer and per function, the idem steps'
 * inclusive shares).
 *
 *   node --import tsx bench/profile-http.ts [hono,express] [seconds]
 */
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import pg from 'pg';
import { uniqueTable } from './lib/config.js';
import { type CpuProfile, folded, inclusive, summarize } from './lib/cpuprofile.js';
import { dropTable } from './lib/fixtures.js';
import { cannon, cycle, seedKeys, startServer } from './lib/http-load.js';

const frameworks = (process.argv[2] ?? 'hono,express').split(',');
const seconds = Number(process.argv[3] ?? 6);
const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const dir = 'bench/out/profile';
await mkdir(dir, { recursive: true });
const admin = new pg.Pool({ connectionString: databaseUrl, max: 1 });

/** The steps of a replay, matched on the profile's call frames (inclusive time). */
const steps: Array<[string, (name: string, url: string) => boolean]> = [
  ['idem HTTP core (prepare → replay Response), all of it', (n, u) => n === 'prepare' && u.includes('/src/http/idempotency')],
  ['  fingerprint (canonical JSON + SHA-256)', (n, u) => n === 'fingerprint' && u.includes('/src/core/fingerprint')],
  ['  scope (credential hash)', (_n, u) => u.includes('/src/http/scope')],
  ['  key parsing', (_n, u) => u.includes('/src/core/key')],
  ['  engine.begin (decision; store.claim or the replay cache)', (n, u) => n === 'begin' && u.includes('/src/engine/engine')],
  ['  replay cache lookup', (_n, u) => u.includes('/src/engine/replay-cache')],
  ['  replay Response (header filter, new Response)', (n, u) => n === 'replayResponse' && u.includes('/src/http/response')],
  ['pg driver (parse, serialize, socket)', (_n, u) => u.includes('node_modules/pg')],
  ['Hono (router, context)', (_n, u) => /node_modules\/hono\//.test(u)],
  ['@hono/node-server (Request/Response bridging)', (_n, u) => u.includes('@hono/node-server')],
  ['Express (router, body parser)', (_n, u) => /node_modules\/(express|body-parser|router|raw-body)\//.test(u)],
  ['undici Request/Headers/Response (Node web streams, fetch classes)', (_n, u) => u.includes('internal/deps/undici') || u.includes('internal/webstreams')],
  ['node http (parser, ServerResponse)', (_n, u) => u.startsWith('node:_http') || u.startsWith('node:http')],
];

const out: string[] = [
  `# Where an HTTP replay's time goes (CPU profile of the server process)`,
  '',
  `\`node --import tsx bench/profile-http.ts ${frameworks.join(',')} ${seconds}\` on ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC, load average ${os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' / ')}; autocannon 16 connections, ${seconds} s per case, the server under \`--cpu-prof\` (which slows it: compare shares, not rates).`,
  '',
];
for (const framework of frameworks) {
  const table = uniqueTable(`prof_${framework}`);
  const results: Record<string, { rate: number; profile: CpuProfile }> = {};
  for (const kase of ['bare', 'replay', 'replay-cached', 'replay-memory']) {
    const profDir = `${dir}/tmp-${framework}-${kase}`;
    await rm(profDir, { recursive: true, force: true });
    const server = await startServer(framework, [databaseUrl, table, redisUrl, table], ['--cpu-prof', `--cpu-prof-dir=${profDir}`]);
    let rate = 0;
    try {
      const route = kase === 'replay' ? '/idem' : kase === 'replay-cached' ? '/idem-cached' : '/idem-memory';
      const stats =
        kase === 'bare'
          ? await cannon(`${server.url}/bare`, 16, seconds)
          : await cannon(`${server.url}${route}`, 16, seconds, cycle(await seedKeys(`${server.url}${route}`, 'p', 200)));
      rate = stats.opsPerSec;
    } finally {
      await server.stop();
    }
    const file = (await readdir(profDir)).find((f) => f.endsWith('.cpuprofile'));
    if (!file) throw new Error(`no profile written in ${profDir}`);
    const target = `${dir}/${framework}-${kase}.cpuprofile`;
    await rename(`${profDir}/${file}`, target);
    await rm(profDir, { recursive: true, force: true });
    const profile = JSON.parse(await readFile(target, 'utf8')) as CpuProfile;
    await writeFile(`${dir}/${framework}-${kase}.folded`, folded(profile));
    results[kase] = { rate, profile };
  }
  await dropTable(admin, table);
  const bare = results.bare!;
  const replay = results.replay!;
  const memory = results['replay-memory']!;
  const cached = results['replay-cached']!;
  out.push(
    `## ${framework}`,
    '',
    `Under the profiler: bare ${bare.rate.toFixed(0)} req/s; replay behind idem on PostgreSQL ${replay.rate.toFixed(0)} req/s (${(replay.rate / bare.rate).toFixed(2)} × bare); replay behind idem on PostgreSQL with replayCache ${cached.rate.toFixed(0)} req/s (${(cached.rate / bare.rate).toFixed(2)} × bare); replay behind idem on the in-process MemoryStore (no round trip) ${memory.rate.toFixed(0)} req/s (${(memory.rate / bare.rate).toFixed(2)} × bare).`,
    '',
  );
  out.push(
    "Inclusive share of the server's busy CPU time per step (a step's callees included):",
    '',
    '| step | replay (PostgreSQL) | replay (replayCache) | replay (MemoryStore) | bare |',
    '|---|---:|---:|---:|---:|',
  );
  const pct = (p: CpuProfile, match: (name: string, url: string) => boolean) => `${(inclusive(p, match) * 100).toFixed(1)} %`;
  for (const [label, match] of steps)
    out.push(`| ${label} | ${pct(replay.profile, match)} | ${pct(cached.profile, match)} | ${pct(memory.profile, match)} | ${pct(bare.profile, match)} |`);
  for (const [kase, r] of Object.entries(results)) {
    const s = summarize(r.profile);
    out.push('', `Self time by layer, ${kase} (busy ${s.busyMs.toFixed(0)} ms over ${seconds} s):`, '', '| layer | ms | share |', '|---|---:|---:|');
    for (const l of s.byLayer.slice(0, 14)) out.push(`| ${l.name} | ${l.ms.toFixed(0)} | ${(l.share * 100).toFixed(1)} % |`);
    out.push('', `Top 20 functions by self time, ${kase}:`, '', '| function | where | ms | share |', '|---|---|---:|---:|');
    for (const f of s.byFunction.slice(0, 20))
      out.push(`| ${f.name.replaceAll('|', '\\|')} | ${f.where} | ${f.ms.toFixed(0)} | ${(f.share * 100).toFixed(1)} % |`);
  }
  out.push('');
}
await writeFile(`${dir}/http.md`, out.join('\n'));
console.log(`wrote ${dir}/http.md`);
await admin.end();
