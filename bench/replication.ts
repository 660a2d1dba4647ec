/**
 * `npx tsx bench/replication.ts`: what a failover does to acknowledged keys, with a
 * synchronous and with an asynchronous standby (issue 11, item 8). For each mode it starts a
 * local primary and a streaming standby (bench/lib/pg-cluster.ts), sends N charges through
 * idem to the primary (each one a 201, so acknowledged to its client), crashes the primary,
 * promotes the standby, and sends every charge again with the same key to the promoted
 * standby, as the client's retries would. The payment provider is outside the database (a
 * ledger in this process, as a real PSP survives the database's failover), so a charge that
 * runs again shows as a second PSP charge for the same client key.
 *
 * Asynchronous: the standby falls behind (its link to the primary goes silent) after
 * `--lag-after` of the charges, as a standby on a slow or broken link does; synchronous: the
 * primary acknowledges a commit only once the standby has it (synchronous_commit = on).
 *
 *   npx tsx bench/replication.ts [--keys 300] [--lag-after 0.5] [--no-write]
 *
 * Writes the figures into docs/reliability.md (between the replication:figures markers)
 * unless --no-write. Exit 1 when the synchronous run lost a key.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { HttpIdempotency } from '../src/http/index.js';
import { PostgresStore, type Queryable } from '../src/postgres/index.js';
import { haveServerBinaries, startCluster } from './lib/pg-cluster.js';

const USAGE = `Usage: npx tsx bench/replication.ts [--keys 300] [--lag-after 0.5] [--no-write]`;
let values: { keys?: string; 'lag-after'?: string; 'no-write'?: boolean; help?: boolean };
try {
  ({ values } = parseArgs({
    options: { keys: { type: 'string' }, 'lag-after': { type: 'string' }, 'no-write': { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  }));
} catch (error) {
  console.error(`${(error as Error).message}\n${USAGE}`);
  process.exit(2);
}
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
if (!haveServerBinaries()) {
  console.error('bench/replication: needs the PostgreSQL server binaries (set PG_BIN, default /usr/lib/postgresql/15/bin)');
  process.exit(2);
}
const keys = Number(values.keys ?? 300);
const lagAfter = Number(values['lag-after'] ?? 0.5);

interface Figures {
  mode: 'synchronous' | 'asynchronous';
  acknowledged: number;
  /** Retries after promotion that got the stored response back. */
  replayed: number;
  /** Retries after promotion whose charge ran again (a second PSP charge). */
  ranAgain: number;
  /** Retries after promotion that got 409: the claim reached the standby, the rest did not; it runs again once the lease ends. */
  inProgress: number;
}

/** The payment provider: outside the database, so it survives the failover. Charges per client key. */
const psp = new Map<string, number>();

function app(pool: pg.Pool) {
  const http = new HttpIdempotency<Queryable>({ store: new PostgresStore({ client: pool, storeTimeoutMs: 10_000 }), onHandlerError: () => undefined });
  return (key: string) =>
    http.handle(
      new Request('http://bench/v1/charges', {
        method: 'POST',
        headers: { 'idempotency-key': key, 'content-type': 'application/json' },
        body: '{"amount":100}',
      }),
      async (_req, idem) => {
        await idem!.phase('charge_created', async (tx) => tx.query('INSERT INTO charges (key) VALUES ($1)', [idem!.key]));
        await idem!.call('psp_charged', async () => psp.set(idem!.key, (psp.get(idem!.key) ?? 0) + 1).get(idem!.key));
        return new Response('{"status":"succeeded"}', { status: 201, headers: { 'content-type': 'application/json' } });
      },
    );
}

async function measure(mode: Figures['mode']): Promise<Figures> {
  psp.clear();
  const cluster = await startCluster({ sync: mode === 'synchronous' });
  try {
    const primary = new pg.Pool({ connectionString: cluster.primary.url(), max: 8 });
    primary.on('error', () => undefined);
    await new PostgresStore({ client: primary }).migrate();
    await primary.query('CREATE TABLE charges (key text NOT NULL)');
    const send = app(primary);
    let acknowledged = 0;
    const prefix = `${mode}-${Date.now()}`;
    for (let i = 0; i < keys; i++) {
      if (mode === 'asynchronous' && i === Math.floor(keys * lagAfter)) cluster.link.mode('silent'); // the standby falls behind
      const res = await send(`${prefix}-${i}`);
      if (res.status === 201) acknowledged++;
      await res.arrayBuffer();
    }
    // Failover: the primary dies, the standby is promoted, the application follows it.
    await cluster.primary.crash();
    await primary.end().catch(() => undefined);
    cluster.link.mode('forward');
    await cluster.promote();
    const promoted = new pg.Pool({ connectionString: cluster.standby.url(), max: 8 });
    promoted.on('error', () => undefined);
    const retry = app(promoted);
    let replayed = 0;
    let ranAgain = 0;
    let inProgress = 0;
    for (let i = 0; i < keys; i++) {
      const key = `${prefix}-${i}`;
      const res = await retry(key);
      await res.arrayBuffer();
      if (res.headers.get('idempotent-replayed') === 'true') replayed++;
      if (res.status === 409) inProgress++;
      if ((psp.get(key) ?? 0) > 1) ranAgain++;
    }
    await promoted.end();
    return { mode, acknowledged, replayed, ranAgain, inProgress };
  } finally {
    await cluster.destroy();
  }
}

const results = [await measure('synchronous'), await measure('asynchronous')];
const table = [
  '| standby | charges acknowledged (201) | replayed after promotion | charged again after promotion | 409, charged again once the lease ends |',
  '|---|---|---|---|---|',
  ...results.map((r) => `| ${r.mode} | ${r.acknowledged} | ${r.replayed} | **${r.ranAgain}** of ${r.acknowledged} | ${r.inProgress} |`),
].join('\n');
console.log(table);

if (!values['no-write']) {
  const file = join(dirname(fileURLToPath(import.meta.url)), '..', 'docs', 'reliability.md');
  const doc = readFileSync(file, 'utf8');
  const block = `<!-- replication:figures:start -->
Last measured ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC with \`npx tsx bench/replication.ts${process.argv.slice(2).length ? ' ' + process.argv.slice(2).join(' ') : ''}\` (PostgreSQL 15, local primary and standby; asynchronous: the standby's link went silent after ${Math.round(lagAfter * 100)} % of the charges):

${table}
<!-- replication:figures:end -->`;
  const start = doc.indexOf('<!-- replication:figures:start -->');
  const end = doc.indexOf('<!-- replication:figures:end -->');
  if (start >= 0 && end > start) {
    writeFileSync(file, doc.slice(0, start) + block + doc.slice(end + '<!-- replication:figures:end -->'.length));
    console.log('docs/reliability.md updated.');
  } else {
    console.log('docs/reliability.md has no replication:figures markers; not written.');
  }
}
process.exit(results[0]!.ranAgain > 0 ? 1 : 0);
