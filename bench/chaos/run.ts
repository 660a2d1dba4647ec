/**
 * `npm run chaos`: the fault-injection harness (issue 4) against real PostgreSQL, idem and
 * then the naive baseline with the same faults; prints the figures and writes them into
 * docs/reliability.md (between the chaos:figures markers). Exit 1 when an idem invariant
 * failed or the naive baseline showed no duplicates.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm run chaos -- [--intents 1200] [--workers 3]
 *     [--concurrency 16] [--naive-intents 300] [--no-naive] [--no-write] [--store postgres|redis|mysql]
 *   … npm run chaos -- --gateway [--intents 600]: the gateway's crash drill (bench/chaos/gateway.ts)
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { DEFAULTS, runChaos, type ChaosResult } from './harness.js';
import { figuresTable, settingsLine, violationLines } from './report.js';

const USAGE = `Usage: DATABASE_URL=postgres://… npm run chaos -- [options]

Runs the fault-injection harness against a fresh database on DATABASE_URL (created and dropped):
idem, then the naive baseline with the same faults; prints the figures and writes them into
docs/reliability.md. Exit 1 when an idem invariant failed or the naive baseline showed no duplicates.

Options:
  --intents <n>        payment intents sent to idem (default ${DEFAULTS.intents})
  --naive-intents <n>  intents sent to the naive baseline (default min(300, intents))
  --workers <n>        API worker processes (default ${DEFAULTS.workers})
  --concurrency <n>    client intents in flight (default ${DEFAULTS.concurrency})
  --no-naive           skip the naive baseline
  --no-write           do not update docs/reliability.md
  --store <name>       postgres (default); redis: claims and replays in Redis (REDIS_URL);
                       mysql: the whole run on MySQL / MariaDB (MYSQL_URL, default
                       mysql://root@127.0.0.1:3306/test), the naive baseline too
  --gateway            the gateway's crash drill instead: 2 \`idem gateway\` processes in front of
                       the Python upstream (bench/chaos/gateway.ts; --intents, --gateways, --concurrency)
  -h, --help           print this help
`;
// `npm run chaos -- --consumer rabbitmq|nats`: the queue consumer's run instead (bench/chaos/consumer.ts),
// which exits the process when done.
if (process.argv.some((a) => a === '--consumer' || a.startsWith('--consumer='))) await import('./consumer.js');
// `npm run chaos -- --gateway`: the gateway's crash drill (bench/chaos/gateway.ts), which exits the process when done.
if (process.argv.includes('--gateway') && !process.argv.includes('--help') && !process.argv.includes('-h')) await import('./gateway.js');

let values: {
  intents?: string;
  'naive-intents'?: string;
  workers?: string;
  concurrency?: string;
  'no-naive'?: boolean;
  'no-write'?: boolean;
  help?: boolean;
  store?: string;
};
try {
  ({ values } = parseArgs({
    options: {
      intents: { type: 'string' },
      'naive-intents': { type: 'string' },
      workers: { type: 'string' },
      concurrency: { type: 'string' },
      'no-naive': { type: 'boolean' },
      'no-write': { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
      store: { type: 'string' },
    },
  }));
} catch (error) {
  console.error(`npm run chaos: ${(error as Error).message}\n\n${USAGE}`);
  process.exit(2);
}
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
// --store mysql: the workers, the naive baseline and the invariants on MySQL (MYSQL_URL).
const store = values.store ?? 'postgres';
if (store !== 'postgres' && store !== 'redis' && store !== 'mysql') {
  console.error(`npm run chaos: --store must be postgres, redis or mysql (got ${store})`);
  process.exit(2);
}
const databaseUrl = store === 'mysql' ? (process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test') : process.env.DATABASE_URL;
if (!databaseUrl) {
  console.error(
    'npm run chaos: set DATABASE_URL to a PostgreSQL server (e.g. postgres://postgres@127.0.0.1:5432/test); a fresh database is created on it and dropped after.',
  );
  process.exit(2);
}
// Ctrl-C / a timeout: exit through process.exit so the harness kills its workers.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(130));
// --store redis: claims and replays in Redis (REDIS_URL, default redis://127.0.0.1:6379), phases
// in PostgreSQL (RedisStore + PostgresPhases, as the example with REDIS_URL).
const redisUrl = store === 'redis' ? (process.env.REDIS_URL ?? 'redis://127.0.0.1:6379') : undefined;
const settings = {
  ...DEFAULTS,
  ...(values.intents ? { intents: Number(values.intents) } : {}),
  ...(values.workers ? { workers: Number(values.workers) } : {}),
  ...(values.concurrency ? { concurrency: Number(values.concurrency) } : {}),
};
const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
console.log(`chaos: ${settingsLine(settings)}`);
const idem = await runChaos({ ...settings, databaseUrl, mode: 'idem', log, ...(redisUrl ? { redisUrl } : {}) });
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
if (naive)
  console.log(
    naiveFailed
      ? 'naive: duplicates found, as expected: the harness catches double charges.'
      : 'naive: NO duplicates found; the harness did not catch the naive design.',
  );

// The figures block holds the PostgreSQL run; a Redis or MySQL run is printed only
// (docs/reliability.md, "Redis"; docs/guides/mysql.md, "Chaos").
if (!values['no-write'] && store === 'postgres') {
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
