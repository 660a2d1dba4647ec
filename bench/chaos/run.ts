/**
 * `npm run chaos`: the fault-injection harness (issue 4) against real PostgreSQL, idem and
 * then the naive baseline with the same faults; prints the figures and writes them into
 * docs/reliability.md (between the chaos:figures markers). Exit 1 when an idem invariant
 * failed or the naive baseline showed no duplicates.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm run chaos -- [--intents 1200] [--workers 3]
 *     [--concurrency 16] [--naive-intents 300] [--no-naive] [--no-write]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { DEFAULTS, runChaos, type ChaosResult } from './harness.js';
import { figuresTable, settingsLine, violationLines } from './report.js';

const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl) {
  console.error('npm run chaos: set DATABASE_URL to a PostgreSQL server (e.g. postgres://postgres@127.0.0.1:5432/test); a fresh database is created on it and dropped after.');
  process.exit(2);
}
// Ctrl-C / a timeout: exit through process.exit so the harness kills its workers.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(130));
// `npm run chaos -- --consumer rabbitmq`: the queue consumer's run instead (bench/chaos/consumer.ts),
// which exits the process when done.
if (process.argv.some((a) => a === '--consumer' || a.startsWith('--consumer='))) await import('./consumer.js');

const { values } = parseArgs({
  options: {
    intents: { type: 'string' },
    'naive-intents': { type: 'string' },
    workers: { type: 'string' },
    concurrency: { type: 'string' },
    'no-naive': { type: 'boolean' },
    'no-write': { type: 'boolean' },
  },
});
const settings = {
  ...DEFAULTS,
  ...(values.intents ? { intents: Number(values.intents) } : {}),
  ...(values.workers ? { workers: Number(values.workers) } : {}),
  ...(values.concurrency ? { concurrency: Number(values.concurrency) } : {}),
};
const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
console.log(`chaos: ${settingsLine(settings)}`);
const idem = await runChaos({ ...settings, databaseUrl, mode: 'idem', log });
let naive: ChaosResult | undefined;
if (!values['no-naive']) {
  naive = await runChaos({ ...settings, intents: Number(values['naive-intents'] ?? Math.min(300, settings.intents)), databaseUrl, mode: 'naive', log });
}
const table = figuresTable(idem, naive);
console.log('\n' + table + '\n');
const violations = violationLines([idem]);
for (const line of violations) console.log(`VIOLATED ${line}`);
if (naive) for (const line of violationLines([naive])) console.log(`naive (expected): ${line}`);
const naiveFailed = naive && naive.duplicates.psp + naive.duplicates.local > 0;
console.log(violations.length === 0 ? 'idem: every invariant held.' : 'idem: INVARIANTS VIOLATED.');
if (naive) console.log(naiveFailed ? 'naive: duplicates found, as expected: the harness catches double charges.' : 'naive: NO duplicates found; the harness did not catch the naive design.');

if (!values['no-write']) {
  const file = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'docs', 'reliability.md');
  const doc = readFileSync(file, 'utf8');
  const block = `<!-- chaos:figures:start -->
Last measured ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC with \`npm run chaos${process.argv.slice(2).length ? ' -- ' + process.argv.slice(2).join(' ') : ''}\`
(${settingsLine(settings)}; naive run: ${naive?.intents ?? 0} intents):

${table}
<!-- chaos:figures:end -->`;
  writeFileSync(file, doc.replace(/<!-- chaos:figures:start -->[\s\S]*<!-- chaos:figures:end -->/, block));
  console.log(`figures written to ${file}`);
}
process.exit(violations.length === 0 && (naive === undefined || naiveFailed) ? 0 : 1);
