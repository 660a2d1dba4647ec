/** Shared setup of the broker consumer suites: a store and an effects table on PostgreSQL or PGlite. */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { freshStore } from './engines.js';
import type { Queryable, SqlClient } from '../../src/postgres/client.js';

/** A migrated store plus `<table>_effects (message_id, note)`; `drop()` removes both. */
export async function consumerTables(client: SqlClient) {
  const { store, table, drop } = await freshStore(client);
  const sql = client as Queryable;
  await sql.query(`CREATE TABLE ${table}_effects (id bigserial PRIMARY KEY, message_id text NOT NULL, note text)`);
  return {
    store,
    table,
    sql,
    insert: (tx: Queryable, id: string, note = 'invoice') => tx.query(`INSERT INTO ${table}_effects (message_id, note) VALUES ($1, $2)`, [id, note]),
    /** Effect rows per message id. */
    counts: async () => {
      const rows = (await sql.query(`SELECT message_id, count(*)::int AS n FROM ${table}_effects GROUP BY message_id`)).rows;
      return new Map(rows.map((r) => [String(r.message_id), Number(r.n)]));
    },
    drop: async () => {
      await sql.query(`DROP TABLE IF EXISTS ${table}_effects`);
      await drop();
    },
  };
}

/** Starts test/helpers/consumer-process.ts and resolves once it printed READY; `phase` resolves on its first PHASE line. */
export async function startConsumerProcess(broker: 'amqp' | 'nats', name: string, table: string, mode: 'handler' | 'effects' = 'handler') {
  const script = fileURLToPath(new URL('./consumer-process.ts', import.meta.url));
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', script, broker, name, table, mode], {
    env: process.env,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout! });
  let onPhase!: (id: string) => void;
  const phase = new Promise<string>((resolve) => (onPhase = resolve));
  const ready = new Promise<void>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`consumer process exited with ${code}`)));
    lines.on('line', (line) => {
      if (line === 'READY') resolve();
      if (line.startsWith('PHASE ')) onPhase(line.slice(6));
    });
  });
  await ready;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const kill = async (): Promise<void> => {
    child.kill('SIGKILL');
    await exited;
  };
  return { child, phase, kill };
}

/** Resolves when `check()` returns true, polling every 50 ms; rejects after `timeoutMs`. */
export async function until(check: () => Promise<boolean> | boolean, timeoutMs = 60_000, what = 'condition'): Promise<void> {
  const stop = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > stop) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
