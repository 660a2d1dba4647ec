/**
 * Profiling aid (not part of the suite): node CPU per replay of a finished key on PostgreSQL
 * (`pg`), idem's engine against the raw primary-key read, sides alternating round by round in
 * one process, so a loaded machine's drift hits all sides alike. CPU time of the process
 * (`process.cpuUsage()`, user + system) divided by the operations of the round.
 *
 *   node --import tsx bench/replay-cpu.ts [concurrency=16] [ms per round=1500] [rounds=6] [tree …]
 *   IDEM_DRIVER=postgresjs node --import tsx bench/replay-cpu.ts …   (postgres.js instead of pg)
 *
 * Each `tree` is the root of a checkout of idem (default: this one), e.g. a second worktree
 * of main, to compare old and new code side by side; `tree:0` runs it with storeTimeoutMs 0.
 */
import { resolve } from 'node:path';
import pg from 'pg';
import postgres from 'postgres';
import { uniqueTable } from './lib/config.js';
import { dropTable, fillDone, FINGERPRINT, keyTable, SCOPE } from './lib/fixtures.js';
import { alternateCpu, type CpuSide, replaySide, reportCpu } from './lib/cpu-sides.js';

const [c = '16', ms = '1500', rounds = '6', ...trees] = process.argv.slice(2);
const concurrency = Number(c);
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test', max: concurrency });
const table = uniqueTable('replaycpu');
await keyTable(pool, table);
await fillDone(pool, table, 1000);
const key = (i: number) => `k${(i % 1000) + 1}`;
const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const pgjs = process.env.IDEM_DRIVER === 'postgresjs' ? postgres(url, { max: concurrency, onnotice: () => undefined }) : undefined;

const sides: CpuSide[] = [];
const readText = `SELECT state, fingerprint, response_status, response_headers, response_body FROM "${table}" WHERE scope = $1 AND key = $2`;
sides.push({
  name: 'raw',
  op: async (i) => {
    const rows = pgjs
      ? await pgjs.unsafe(readText, [SCOPE, key(i)], { prepare: true })
      : (await pool.query({ name: `raw_read_${table}`, text: readText, values: [SCOPE, key(i)] })).rows;
    if (rows[0]?.state !== 'done') throw new Error('raw read found no finished row');
  },
  cpu: [],
});
for (const spec of trees.length ? trees : ['.']) {
  const [root, timeout] = spec.split(':');
  const dir = resolve(root!);
  const { IdempotencyEngine } = await import(`${dir}/src/engine/engine.ts`);
  const { PostgresStore } = await import(`${dir}/src/postgres/index.ts`);
  const client = pgjs ? (await import(`${dir}/src/postgresjs/index.ts`)).postgresjs(pgjs) : pool;
  const store = new PostgresStore({ client, table, ...(timeout === undefined ? {} : { storeTimeoutMs: Number(timeout) }) });
  const engine = new IdempotencyEngine({ store });
  // Warm the store's replay share so it reads first, as in a replay workload.
  for (let i = 0; i < 64; i++) await engine.begin({ scope: SCOPE, key: key(i), fingerprint: FINGERPRINT });
  sides.push(replaySide(spec, engine, key));
}
await alternateCpu(sides, concurrency, Number(ms), Number(rounds));
reportCpu(sides);
await dropTable(pool, table);
await pool.end();
await pgjs?.end();
