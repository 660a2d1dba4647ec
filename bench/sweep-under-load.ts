/**
 * Sweep under load: fills a table with 1 M rows past retention and 100 k live rows on
 * PostgreSQL, measures claim latency with concurrent claimers before the sweep, then runs the
 * real `idem sweep` CLI (by default two sweepers at once, as from two hosts) while the same
 * claimers keep going, and reports claim p50/p99 during vs before as a ratio, plus row counts
 * before and after (the sweep must remove exactly the expired rows). Not a test; CI does not
 * run it. Works in a fresh database `idem_bench_<random>`, dropped at the end.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx bench/sweep-under-load.ts \
 *     [--mode plain|partitioned] [--expired 1000000] [--live 100000] [--concurrency 8]
 *     [--before-s 20] [--sweepers 2] [--batch-size 1000]
 *
 * Live rows: created within the last 23 h (half finished, half in progress with an expired
 * lease), plus 500 rows past retention whose lease is still valid (a worker alive past
 * retention), which a sweep must keep. Claims: 90 % new keys, 10 % retries of a live key.
 * Partitioned mode puts the expired rows in the partition of the day before yesterday (UTC),
 * which the sweep drops in one statement.
 */
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { PostgresStore } from '../src/postgres/index.js';
import { partitionedStatements } from '../src/postgres/sql.js';

const { values: args } = parseArgs({
  options: {
    mode: { type: 'string', default: 'plain' },
    expired: { type: 'string', default: '1000000' },
    live: { type: 'string', default: '100000' },
    concurrency: { type: 'string', default: '8' },
    'before-s': { type: 'string', default: '20' },
    sweepers: { type: 'string', default: '2' },
    'batch-size': { type: 'string', default: '1000' },
  },
});
const MODE = args.mode === 'partitioned' ? 'partitioned' : 'plain';
const EXPIRED = Number(args.expired);
const LIVE = Number(args.live);
const LIVE_PAST_RETENTION = 500;
const CONCURRENCY = Number(args.concurrency);
const BEFORE_MS = Number(args['before-s']) * 1000;
const SWEEPERS = MODE === 'partitioned' ? 1 : Number(args.sweepers);
const BATCH = Number(args['batch-size']);
const RETENTION_MS = 24 * 3600_000;

const baseUrl = process.env.DATABASE_URL;
if (!baseUrl) throw new Error('set DATABASE_URL to a PostgreSQL server');
const dbName = `idem_bench_${randomBytes(4).toString('hex')}`;
const admin = new pg.Pool({ connectionString: baseUrl, max: 1 });
await admin.query(`CREATE DATABASE ${dbName}`);
const url = new URL(baseUrl);
url.pathname = `/${dbName}`;
const pool = new pg.Pool({ connectionString: url.toString(), max: CONCURRENCY + 2 });
// DROP DATABASE ... WITH (FORCE) at the end ends idle connections: not an error here.
pool.on('error', () => undefined);
const table = 'idempotency_keys';
const store = new PostgresStore({ client: pool, table, partitioned: MODE === 'partitioned' });

const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;

try {
  await store.migrate();
  if (MODE === 'partitioned') {
    // The day before yesterday (UTC): wholly past a 24 h retention.
    const day = String((await pool.query(`SELECT to_char((now() AT TIME ZONE 'UTC')::date - 2, 'YYYY-MM-DD') AS d`)).rows[0].d);
    const next = String((await pool.query(`SELECT to_char($1::date + 1, 'YYYY-MM-DD') AS d`, [day])).rows[0].d);
    await pool.query(partitionedStatements(table).createPartition(`${table}_p${day.replaceAll('-', '')}`, day, next));
  }

  log(`filling ${EXPIRED.toLocaleString()} expired + ${LIVE.toLocaleString()} live rows (${MODE} table)`);
  const expiredAt =
    MODE === 'partitioned'
      ? `date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '2 days' + random() * interval '23 hours'`
      : `now() - interval '25 hours' - random() * interval '24 hours'`;
  for (let from = 0; from < EXPIRED; from += 250_000) {
    await pool.query(
      `INSERT INTO ${table} (scope, key, fingerprint, state, recovery_point, locked_until, response_status, response_headers,
         response_body, created_at, finished_at)
       SELECT 'tenant-' || (i % 100), 'exp-' || md5(i::text), sha256(i::text::bytea), 'done', 'finished', NULL, 201,
         '[["content-type","application/json"]]'::jsonb, convert_to(repeat('x', 200), 'UTF8'), ${expiredAt}, now()
       FROM generate_series($1::int, $2::int) AS i`,
      [from, Math.min(EXPIRED, from + 250_000) - 1],
    );
  }
  await pool.query(
    `INSERT INTO ${table} (scope, key, fingerprint, state, recovery_point, locked_until, response_status, response_headers,
       response_body, created_at)
     SELECT 'tenant-' || (i % 100), 'live-' || i, sha256(i::text::bytea),
       CASE WHEN i % 2 = 0 THEN 'done' ELSE 'started' END, CASE WHEN i % 2 = 0 THEN 'finished' ELSE 'start' END,
       CASE WHEN i % 2 = 0 THEN NULL ELSE now() - interval '1 minute' END,
       CASE WHEN i % 2 = 0 THEN 201 END, CASE WHEN i % 2 = 0 THEN '[]'::jsonb END,
       CASE WHEN i % 2 = 0 THEN convert_to(repeat('y', 200), 'UTF8') END,
       now() - random() * interval '23 hours'
     FROM generate_series(0, $1::int - 1) AS i`,
    [LIVE - LIVE_PAST_RETENTION],
  );
  // Past retention but still leased: a worker alive past retention; the sweep must keep them.
  await pool.query(
    `INSERT INTO ${table} (scope, key, fingerprint, locked_until, created_at)
     SELECT 'tenant-x', 'leased-' || i, sha256(i::text::bytea), now() + interval '2 hours', now() - interval '25 hours'
     FROM generate_series(1, $1::int) AS i`,
    [LIVE_PAST_RETENTION],
  );
  await pool.query(`VACUUM ANALYZE ${table}`);

  const counts = async () => {
    const row = (
      await pool.query(
        `SELECT count(*) FILTER (WHERE key LIKE 'exp-%')::int AS expired,
           count(*) FILTER (WHERE key LIKE 'live-%' OR key LIKE 'leased-%')::int AS live,
           count(*) FILTER (WHERE key LIKE 'bench-%')::int AS claimed,
           count(*)::int AS total FROM ${table}`,
      )
    ).rows[0];
    return row as { expired: number; live: number; claimed: number; total: number };
  };
  const before = await counts();
  log(`before: ${JSON.stringify(before)}`);

  // Claimers: run until `stop()` resolves; latencies in ms.
  const fp = new Uint8Array(32).fill(7);
  const claimLoad = (until: Promise<unknown>) => {
    let done = false;
    void until.then(() => (done = true));
    const latencies: number[] = [];
    let errors = 0;
    const workers = Array.from({ length: CONCURRENCY }, async () => {
      while (!done) {
        const retry = Math.random() < 0.1;
        const i = Math.floor(Math.random() * (LIVE - LIVE_PAST_RETENTION));
        const input = retry
          ? { scope: `tenant-${i % 100}`, key: `live-${i}`, fingerprint: fp, leaseMs: 60_000, retentionMs: RETENTION_MS }
          : { scope: 'tenant-bench', key: `bench-${randomUUID()}`, fingerprint: fp, leaseMs: 60_000, retentionMs: RETENTION_MS };
        const t0 = performance.now();
        try {
          await store.claim(input);
          latencies.push(performance.now() - t0);
        } catch {
          errors++;
        }
      }
    });
    return Promise.all(workers).then(() => ({ latencies: latencies.sort((a, b) => a - b), errors }));
  };
  const summarise = (name: string, r: { latencies: number[]; errors: number }, ms: number) => {
    const s = {
      claims: r.latencies.length,
      perS: Math.round(r.latencies.length / (ms / 1000)),
      p50: quantile(r.latencies, 0.5),
      p99: quantile(r.latencies, 0.99),
      max: r.latencies.at(-1) ?? NaN,
      errors: r.errors,
    };
    log(
      `${name.padEnd(14)} ${s.claims} claims, ${s.perS}/s, p50 ${s.p50.toFixed(2)} ms, p99 ${s.p99.toFixed(2)} ms, max ${s.max.toFixed(1)} ms, errors ${s.errors}`,
    );
    return s;
  };

  log(`claims before the sweep: ${BEFORE_MS / 1000} s at concurrency ${CONCURRENCY}`);
  const b0 = Date.now();
  const beforeStats = summarise('before sweep', await claimLoad(new Promise((r) => setTimeout(r, BEFORE_MS))), Date.now() - b0);

  log(`sweep: ${SWEEPERS} x idem sweep --batch-size ${BATCH}, while the claims go on`);
  const cli = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
  const sweeps = Array.from(
    { length: SWEEPERS },
    () =>
      new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
        const child = spawn(process.execPath, ['--import', 'tsx', cli, 'sweep', '--json', '--table', table, '--batch-size', String(BATCH)], {
          env: { ...process.env, DATABASE_URL: url.toString() },
        });
        let out = '';
        let err = '';
        child.stdout.on('data', (d) => (out += d));
        child.stderr.on('data', (d) => (err += d));
        child.on('close', (code) => resolve({ code, out, err }));
      }),
  );
  const s0 = Date.now();
  const sweepDone = Promise.all(sweeps);
  const during = await claimLoad(sweepDone);
  const sweepMs = Date.now() - s0;
  const duringStats = summarise('during sweep', during, sweepMs);
  const results = await sweepDone;
  let deletedBySweepers = 0;
  for (const [n, r] of results.entries()) {
    if (r.code !== 0) throw new Error(`sweeper ${n} exited ${r.code}: ${r.err}`);
    const report = JSON.parse(r.out) as { deleted: number; batches: number; durationMs: number; droppedPartitions: string[] };
    deletedBySweepers += report.deleted;
    log(
      `sweeper ${n}: deleted ${report.deleted}, ${report.batches} batches, ${report.durationMs} ms${report.droppedPartitions.length ? `, dropped ${report.droppedPartitions.join(', ')}` : ''}`,
    );
  }

  const after = await counts();
  log(`after: ${JSON.stringify(after)}`);
  const exact = after.expired === 0 && deletedBySweepers === before.expired && after.live === before.live;
  console.log('');
  console.log(
    `mode ${MODE}; ${before.expired.toLocaleString()} expired + ${before.live.toLocaleString()} live rows; ${SWEEPERS} sweeper(s), batch ${BATCH}; ${CONCURRENCY} claimers`,
  );
  console.log(`sweep wall time        ${(sweepMs / 1000).toFixed(1)} s; rows deleted ${deletedBySweepers.toLocaleString()} (sum over sweepers)`);
  console.log(`expired rows           before ${before.expired.toLocaleString()}, after ${after.expired}`);
  console.log(
    `live rows              before ${before.live.toLocaleString()}, after ${after.live.toLocaleString()}; claimed during the run: ${after.claimed.toLocaleString()}`,
  );
  console.log(`exactly the expired rows removed, none twice: ${exact ? 'yes' : 'NO'}`);
  console.log(
    `claim p50              before ${beforeStats.p50.toFixed(2)} ms, during ${duringStats.p50.toFixed(2)} ms, ratio ${(duringStats.p50 / beforeStats.p50).toFixed(2)}`,
  );
  console.log(
    `claim p99              before ${beforeStats.p99.toFixed(2)} ms, during ${duringStats.p99.toFixed(2)} ms, ratio ${(duringStats.p99 / beforeStats.p99).toFixed(2)}`,
  );
  console.log(`claim throughput       before ${beforeStats.perS}/s, during ${duringStats.perS}/s`);
  if (!exact) process.exitCode = 1;
} finally {
  await pool.end();
  await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  await admin.end();
}
