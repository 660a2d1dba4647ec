/**
 * Profiling aid (not part of the suite): node CPU per replay of a finished key on MySQL /
 * MariaDB (mysql2), idem's engine against the raw read (the statement `MySqlStore` answers a
 * finished key with, on `pool.query`), sides alternating round by round in one process, as
 * bench/replay-cpu.ts does for PostgreSQL. CPU time of the process (`process.cpuUsage()`,
 * user + system) divided by the operations of the round.
 *
 *   MYSQL_URL=… node --import tsx bench/mysql-replay-cpu.ts [concurrency=16] [ms per round=1500] [rounds=6] [tree …]
 *   MYSQL_URL=… node --import tsx bench/mysql-replay-cpu.ts canned [tree …]
 *
 * `canned`: idem's own JavaScript only, each tree's engine on a pool whose query resolves the
 * stored row at once (no socket, no server), one replay after another.
 *
 * Each `tree` is the root of a checkout of idem (default: this one), e.g. a second worktree
 * of main, to compare old and new code side by side.
 */
import { resolve } from 'node:path';
import mysql, { type RowDataPacket } from 'mysql2/promise';
import { uniqueTable } from './lib/config.js';
import { BODY, FINGERPRINT, HEADERS, SCOPE } from './lib/fixtures.js';
import { alternateCpu, type CpuSide, replaySide, reportCpu } from './lib/cpu-sides.js';

const canned = process.argv[2] === 'canned';
const [c = '16', ms = '1500', rounds = '6', ...trees] = canned ? ['1', '0', '8', ...process.argv.slice(3)] : process.argv.slice(2);
const concurrency = Number(c);
const url = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
const pool = mysql.createPool({ uri: url, connectionLimit: concurrency });
const table = uniqueTable('myreplaycpu');
const KEYS = 1000;
const key = (i: number) => `k${(i % KEYS) + 1}`;

const sides: CpuSide[] = [];
const specs = trees.length ? trees : ['.'];
const first = resolve(specs[0]!);
const { MySqlStore: FirstStore } = await import(`${first}/src/mysql/index.ts`);
const { IdempotencyEngine: FirstEngine } = await import(`${first}/src/engine/engine.ts`);
const filler = new FirstStore({ client: pool, table });
await filler.migrate();
const fill = new FirstEngine({ store: filler });
for (let i = 1; i <= KEYS; i += 50) {
  await Promise.all(
    Array.from({ length: Math.min(50, KEYS - i + 1) }, async (_, j) => {
      const begun = await fill.begin({ scope: SCOPE, key: `k${i + j}`, fingerprint: FINGERPRINT });
      if (begun.kind === 'execute') await begun.execution.finish({ status: 201, headers: HEADERS, body: BODY });
    }),
  );
}
const { mysqlStatements } = await import(`${first}/src/mysql/sql.ts`);
const sql = mysqlStatements(table);
const RET = 86_400_000_000;
const scope = Buffer.from(SCOPE);
if (canned) {
  const [row] = (await pool.query<RowDataPacket[]>(sql.read, [RET, RET, scope, Buffer.from('k1')]))[0];
  const conn = { query: () => Promise.resolve([[row], []]), release() {}, destroy() {} };
  const fake = { getConnection: () => Promise.resolve(conn) };
  const engines: Array<{ name: string; engine: InstanceType<typeof FirstEngine>; cpu: number[] }> = [];
  for (const spec of specs) {
    const { IdempotencyEngine } = await import(`${resolve(spec)}/src/engine/engine.ts`);
    const { MySqlStore } = await import(`${resolve(spec)}/src/mysql/index.ts`);
    engines.push({ name: spec, engine: new IdempotencyEngine({ store: new MySqlStore({ client: fake, table }) }), cpu: [] });
  }
  const N = 30_000;
  for (let r = 0; r <= Number(rounds); r++) {
    for (const side of r % 2 ? [...engines].reverse() : engines) {
      const before = process.cpuUsage();
      for (let i = 0; i < N; i++) {
        const begun = await side.engine.begin({ scope: SCOPE, key: 'k1', fingerprint: FINGERPRINT });
        if (begun.kind !== 'replay') throw new Error(`expected a replay, got ${begun.kind}`);
      }
      const used = process.cpuUsage(before);
      if (r > 0) side.cpu.push((used.user + used.system) / N); // round 0 warms up
    }
  }
  const med = (v: number[]) => [...v].sort((a, b) => a - b)[v.length >> 1]!;
  for (const side of engines)
    console.log(
      `${side.name.padEnd(28)} µs/replay median ${med(side.cpu).toFixed(2)} (${Math.min(...side.cpu).toFixed(2)}–${Math.max(...side.cpu).toFixed(2)})`,
    );
  await filler.dropTables();
  await pool.end();
  process.exit(0);
}
// The raw side: the replay read as the bench's raw side sends it (bench/mysql.ts `rawSide`).
sides.push({
  name: 'raw',
  op: async (i) => {
    const [rows] = await pool.query<RowDataPacket[]>(sql.read, [RET, RET, scope, Buffer.from(key(i))]);
    if (rows[0]?.state !== 'done') throw new Error('raw read found no finished row');
  },
  cpu: [],
});
for (const spec of specs) {
  const dir = resolve(spec);
  const { IdempotencyEngine } = await import(`${dir}/src/engine/engine.ts`);
  const { MySqlStore } = await import(`${dir}/src/mysql/index.ts`);
  const engine = new IdempotencyEngine({ store: new MySqlStore({ client: pool, table }) });
  sides.push(replaySide(spec, engine, key));
}
await alternateCpu(sides, concurrency, Number(ms), Number(rounds));
reportCpu(sides);
await filler.dropTables();
await pool.end();
