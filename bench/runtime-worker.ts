/**
 * One runtime's side of the `runtimes` section (bench/runtimes.ts): run by Node 24 (through tsx)
 * and by Bun on the same source. It measures idem against raw on PostgreSQL through `pg` in this
 * runtime (bench/library.ts's two sides: idem's own claim and finish statements against
 * `engine.begin()` + `finish()`; one read against a replay), alternating rounds, and prints one
 * JSON line. Settings come from the environment: DATABASE_URL, BENCH_CASE_MS, BENCH_ROUNDS,
 * BENCH_CONCURRENCY.
 */
import pg from 'pg';
import { IdempotencyEngine } from '../src/engine/engine.js';
import type { Queryable } from '../src/postgres/client.js';
import { dropTable, fillDone, keyTable } from './lib/fixtures.js';
import { closedLoop, interleave } from './lib/measure.js';
import { idemSide, type Run, rawSide } from './library.js';

const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const caseMs = Number(process.env.BENCH_CASE_MS ?? 1000);
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 16);
const tag = `${process.pid}_${Math.floor(Math.random() * 1e6)}`;
const rawTable = `bench_rt_raw_${tag}`;
const idemTable = `bench_rt_idem_${tag}`;

const pool = new pg.Pool({ connectionString: url, max: concurrency });
try {
  for (const t of [rawTable, idemTable]) {
    await keyTable(pool, t);
    await fillDone(pool, t, 1000);
  }
  const store = await keyTable(pool, idemTable);
  const runQuery: Run = (text, values, name) => pool.query({ name, text, values });
  const raw = rawSide(runQuery, rawTable);
  const idem = idemSide(new IdempotencyEngine<Queryable>({ store }));
  const loop = (op: (i: number) => Promise<void>) => () => closedLoop(op, concurrency, caseMs);
  for (const op of [raw.newRequest, idem.newRequest, raw.read, idem.replay]) await closedLoop(op, concurrency, 300);
  const fresh = await interleave({ raw: loop(raw.newRequest), idem: loop(idem.newRequest) }, rounds);
  const replay = await interleave({ raw: loop(raw.read), idem: loop(idem.replay) }, rounds);
  const bun = (globalThis as { Bun?: { version: string } }).Bun;
  console.log(JSON.stringify({ runtime: bun ? `Bun ${bun.version}` : `Node.js ${process.version}`, fresh, replay }));
} finally {
  for (const t of [rawTable, idemTable]) await dropTable(pool, t);
  await pool.end();
}
