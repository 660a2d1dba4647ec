/**
 * Quick benchmark: idem's engine on the PostgreSQL store vs the same work as raw SQL through
 * the same driver (pg), side by side in one run, reported as ratios (absolute times drift
 * on shared machines). Not a test; CI does not run it.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx bench/engine-vs-raw.ts [seconds per case] [concurrency]
 *
 * Both sides use named (prepared) statements, as idem does on pg.
 *
 * new request: raw = claim INSERT + finish UPDATE (1 KB body), two autocommit statements;
 *              idem = engine.begin() + execution.finish() (heartbeat off).
 * replay:      raw = one primary-key SELECT of the stored response;
 *              idem = engine.begin() on a finished key.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { PostgresStore } from '../src/postgres/index.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const seconds = Number(process.argv[2] ?? 5);
const concurrency = Number(process.argv[3] ?? 16);
const pool = new pg.Pool({ connectionString: url, max: concurrency });
const table = `idem_bench_${process.pid}`;
const store = new PostgresStore({ client: pool, table });
await store.migrate();
await pool.query(`CREATE TABLE raw_${table} (scope text, key text, fingerprint bytea, state text DEFAULT 'started',
  locked_until timestamptz, lock_version bigint DEFAULT 0, response_status int, response_body bytea,
  created_at timestamptz DEFAULT now(), PRIMARY KEY (scope, key))`);
const engine = new IdempotencyEngine({ store, heartbeatMs: 0 });
const body = new Uint8Array(1024).fill(120);
const fp = new Uint8Array(32).fill(7);

async function run(name: string, op: (i: number) => Promise<void>): Promise<number> {
  let n = 0;
  const deadline = Date.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < deadline) await op(n++);
    }),
  );
  const rate = n / seconds;
  console.log(`${name.padEnd(28)} ${rate.toFixed(0).padStart(7)} ops/s`);
  return rate;
}

const rawNew = () =>
  run('raw new request', async () => {
    const key = randomUUID();
    await pool.query({
      name: 'raw_claim',
      text: `INSERT INTO raw_${table} (scope, key, fingerprint, locked_until) VALUES ($1, $2, $3, now() + interval '60 seconds')
       ON CONFLICT (scope, key) DO NOTHING RETURNING lock_version`,
      values: ['s', key, fp],
    });
    await pool.query({
      name: 'raw_finish',
      text: `UPDATE raw_${table} SET state = 'done', response_status = 201, response_body = $3, locked_until = NULL
       WHERE scope = $1 AND key = $2 AND lock_version = 0`,
      values: ['s', key, body],
    });
  });
const idemNew = () =>
  run('idem new request', async () => {
    const begun = await engine.begin({ scope: 's', key: randomUUID(), fingerprint: fp });
    if (begun.kind !== 'execute') throw new Error('expected a claim');
    await begun.execution.finish({ status: 201, headers: [['content-type', 'application/json']], body });
  });

// Keys to replay: finished rows in both tables.
const replayKeys = Array.from({ length: 1000 }, () => randomUUID());
for (const key of replayKeys) {
  const begun = await engine.begin({ scope: 's', key, fingerprint: fp });
  if (begun.kind === 'execute') await begun.execution.finish({ status: 201, headers: [], body });
  await pool.query(`INSERT INTO raw_${table} (scope, key, fingerprint, state, response_status, response_body) VALUES ('s', $1, $2, 'done', 201, $3)`, [
    key,
    fp,
    body,
  ]);
}
const rawReplay = () =>
  run('raw replay (PK read)', async (i) => {
    await pool.query({
      name: 'raw_read',
      text: `SELECT state, fingerprint, response_status, response_body FROM raw_${table} WHERE scope = $1 AND key = $2`,
      values: ['s', replayKeys[i % 1000]],
    });
  });
const idemReplay = () =>
  run('idem replay', async (i) => {
    const begun = await engine.begin({ scope: 's', key: replayKeys[i % 1000]!, fingerprint: fp });
    if (begun.kind !== 'replay') throw new Error('expected a replay');
  });

console.log(`PostgreSQL via pg, concurrency ${concurrency}, ${seconds} s per case, cases interleaved twice`);
const results = { rawNew: 0, idemNew: 0, rawReplay: 0, idemReplay: 0 };
for (let round = 0; round < 2; round++) {
  results.rawNew += await rawNew();
  results.idemNew += await idemNew();
  results.rawReplay += await rawReplay();
  results.idemReplay += await idemReplay();
}
console.log(`ratio new request idem/raw: ${(results.idemNew / results.rawNew).toFixed(2)}`);
console.log(`ratio replay idem/raw:      ${(results.idemReplay / results.rawReplay).toFixed(2)}`);
await pool.query(`DROP TABLE ${table}_blobs; DROP TABLE ${table}; DROP TABLE raw_${table}; DROP SEQUENCE IF EXISTS ${table}_lock_version_seq`);
await pool.end();
