/**
 * (5b) App-process memory over many keys: a child process pushes the keys through the
 * engine and samples its own RSS and heapUsed after a full GC. idem keeps no per-key state in
 * the process, so neither may grow with the number of keys.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import pg from 'pg';
import type { BenchConfig } from './lib/config.js';
import { uniqueTable } from './lib/config.js';
import { dropTable, type Section } from './lib/fixtures.js';

interface Sample {
  keys: number;
  rss: number;
  heapUsed: number;
  external: number;
  t: number;
}

const mb = (n: number) => (n / 2 ** 20).toFixed(1);

export async function memory(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const table = uniqueTable('memory');
  const samples: Sample[] = [];
  try {
    const child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', 'bench/lib/memory-worker.ts', cfg.databaseUrl, table, String(cfg.memoryKeys)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const lines = createInterface({ input: child.stdout });
    lines.on('line', (line) => {
      const s = JSON.parse(line) as Sample;
      samples.push(s);
      if (samples.length % 5 === 0) log(`  ${s.keys.toLocaleString('en-US')} keys, rss ${mb(s.rss)} MB, heapUsed ${mb(s.heapUsed)} MB`);
    });
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    if (code !== 0) throw new Error(`memory worker exited with ${code}`);
  } finally {
    const admin = new pg.Pool({ connectionString: cfg.databaseUrl, max: 1 });
    await dropTable(admin, table);
    await admin.end();
  }
  // Compare the first sample after warm-up (10 % of the keys) with the last.
  const warm = samples.find((s) => s.keys >= cfg.memoryKeys / 10) ?? samples[0]!;
  const last = samples.at(-1)!;
  const seconds = (last.t - samples[0]!.t) / 1000;
  const perKey = (last.heapUsed - warm.heapUsed) / Math.max(1, last.keys - warm.keys);
  const rows = samples.filter((_, i) => i % 4 === 0 || i === samples.length - 1);
  return {
    title: 'Memory: app process over many keys',
    markdown: [
      `${cfg.memoryKeys.toLocaleString('en-US')} new keys through the engine (PostgreSQL store, 64 concurrent, heartbeat on) in a child process, ` +
        `${seconds.toFixed(0)} s; memory sampled after a full GC every ${Math.floor(cfg.memoryKeys / 20).toLocaleString('en-US')} keys. ` +
        `These connections run with synchronous_commit=off (the app's memory does not depend on commit durability).` +
        (cfg.memoryKeys < 1_000_000 ? ` **${cfg.quick ? 'Quick mode' : 'Reduced with --memory-keys'}: fewer keys than the 1 M of the full run.**` : ''),
      '',
      '| keys | RSS MB | heapUsed MB | external MB |',
      '|---:|---:|---:|---:|',
      ...rows.map((s) => `| ${s.keys.toLocaleString('en-US')} | ${mb(s.rss)} | ${mb(s.heapUsed)} | ${mb(s.external)} |`),
      '',
      `heapUsed from ${warm.keys.toLocaleString('en-US')} to ${last.keys.toLocaleString('en-US')} keys: ${mb(warm.heapUsed)} → ${mb(last.heapUsed)} MB ` +
        `(${perKey.toFixed(3)} bytes per key; RSS ${mb(warm.rss)} → ${mb(last.rss)} MB).`,
    ].join('\n'),
    headline: { [`heapUsed growth per key over ${last.keys.toLocaleString('en-US')} keys (bytes)`]: perKey.toFixed(3) },
  };
}
