/**
 * The runtime suite (scripts/runtimes.sh): idem installed from its tarball, run on Node, Bun or
 * Deno. On each store the runtime reaches (memory; SQLite on a file through the runtime's own
 * driver, bun:sqlite on Bun and node:sqlite on Node and Deno; PostgreSQL through pg and through
 * postgres.js; Redis through node-redis) a Hono app served by the runtime's own server answers over a real
 * socket: the first 201, a byte-identical replay marked `Idempotent-Replayed`, 422 for the same
 * key with another body, one run for 32 concurrent duplicates. Then a crash drill on PostgreSQL:
 * a server process of the same runtime is SIGKILLed after its phase committed, and the retry on
 * a new process resumes from the recovery point (one row, the same charge).
 * Exits 1 on the first failure. DATABASE_URL and REDIS_URL name the services.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryStore } from 'idem/memory';
import { SqliteStore } from 'idem/sqlite';
import { PostgresStore } from 'idem/postgres';
import { postgresjs } from 'idem/postgresjs';
import { RedisStore } from 'idem/redis';
import pg from 'pg';
import postgres from 'postgres';
import { createClient } from '@redis/client';
import { command, createApp, runtime, serve } from './shared.mjs';

const env = (name) => (globalThis.Deno ? globalThis.Deno.env.get(name) : process.env[name]);
const DATABASE_URL = env('DATABASE_URL');
const REDIS_URL = env('REDIS_URL');
const { name, version } = runtime();
const label = `${name} ${version}`;
let failures = 0;

async function check(title, fn) {
  const started = Date.now();
  try {
    await fn();
    console.log(`ok - ${label}: ${title} (${Date.now() - started} ms)`);
  } catch (error) {
    failures++;
    console.log(`not ok - ${label}: ${title}\n  ${String(error?.stack ?? error).replaceAll('\n', '\n  ')}`);
  }
}

const post = (port, key, body) =>
  fetch(`http://127.0.0.1:${port}/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
  });

/** The HTTP answers on one store: `open()` gives `{ store, close }`. */
async function httpChecks(storeName, open) {
  await check(`${storeName}: replay, mismatch and 32 concurrent duplicates over a real socket`, async () => {
    const { store, close } = await open();
    let runs = 0;
    const app = createApp(store, async (_tx, body) => {
      runs++;
      await new Promise((r) => setTimeout(r, 20)); // long enough for the duplicates to meet it
      return { id: runs, amount: body.amount };
    });
    const server = await serve(app.fetch);
    try {
      const key = randomUUID();
      const first = await post(server.port, key, { amount: 100 });
      assert.equal(first.status, 201);
      const firstBody = await first.text();
      const again = await post(server.port, key, { amount: 100 });
      assert.equal(again.status, 201);
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.equal(await again.text(), firstBody, 'the replay is byte for byte the first answer');
      const other = await post(server.port, key, { amount: 999 });
      assert.equal(other.status, 422);
      assert.match(other.headers.get('content-type') ?? '', /application\/problem\+json/);
      await other.text();
      assert.equal(runs, 1);

      const dup = randomUUID();
      const answers = await Promise.all(Array.from({ length: 32 }, () => post(server.port, dup, { amount: 7 })));
      const statuses = answers.map((r) => r.status);
      await Promise.all(answers.map((r) => r.text()));
      assert.equal(runs, 2, `32 concurrent duplicates ran the work once (statuses ${statuses.join(',')})`);
      assert.ok(
        statuses.every((s) => s === 201 || s === 409),
        `every duplicate got 201 or 409: ${statuses.join(',')}`,
      );
    } finally {
      await server.close();
      await close();
    }
  });
}

await httpChecks('memory store', async () => ({ store: new MemoryStore(), close: async () => {} }));

/** The runtime's own SQLite: `bun:sqlite` on Bun, `node:sqlite` on Node (22.13+) and Deno. */
async function openSqlite(file) {
  if (globalThis.Bun) {
    const { Database } = await import('bun:sqlite');
    return { driver: 'bun:sqlite', db: new Database(file) };
  }
  const { DatabaseSync } = await import('node:sqlite');
  return { driver: 'node:sqlite', db: new DatabaseSync(file) };
}
const sqliteDir = mkdtempSync(join(tmpdir(), 'idem-rt-sqlite-'));
const sqlite = await openSqlite(join(sqliteDir, 'idem.db'));
await httpChecks(`SQLite through ${sqlite.driver}`, async () => {
  const store = new SqliteStore({ client: sqlite.db });
  await store.migrate();
  return {
    store,
    close: async () => {
      sqlite.db.close();
      rmSync(sqliteDir, { recursive: true, force: true });
    },
  };
});

if (DATABASE_URL) {
  await httpChecks('PostgreSQL through pg', async () => {
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 8 });
    const store = new PostgresStore({ client: pool, table: `idem_rt_${name}_pg` });
    await store.migrate();
    return { store, close: () => pool.end() };
  });
  await httpChecks('PostgreSQL through postgres.js', async () => {
    const sql = postgres(DATABASE_URL, { max: 8, onnotice: () => {} });
    const store = new PostgresStore({ client: postgresjs(sql), table: `idem_rt_${name}_pgjs` });
    await store.migrate();
    return { store, close: () => sql.end() };
  });
} else console.log(`# ${label}: DATABASE_URL unset, the PostgreSQL checks and the crash drill are skipped`);

if (REDIS_URL) {
  await httpChecks('Redis through node-redis', async () => {
    const client = await createClient({ url: REDIS_URL }).connect();
    const store = new RedisStore({ client, prefix: `idem-rt-${name}-${randomUUID()}` });
    return { store, close: () => client.quit() };
  });
} else console.log(`# ${label}: REDIS_URL unset, the Redis checks are skipped`);

/** Starts server.mjs on this runtime; resolves when it prints `listening <port>`, and on each `held` line. */
function startServer(table, hold) {
  const [exe, args] = command(fileURLToPath(new URL('./server.mjs', import.meta.url)));
  const child = spawn(exe, args, { env: { ...process.env, DATABASE_URL, DRILL_TABLE: table, HOLD: hold ? '1' : '0' }, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = [];
  const waiters = [];
  let buffered = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (chunk) => {
    buffered += chunk;
    for (let i = buffered.indexOf('\n'); i >= 0; i = buffered.indexOf('\n')) {
      lines.push(buffered.slice(0, i));
      buffered = buffered.slice(i + 1);
      for (const w of waiters.splice(0)) w();
    }
  });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const line = async (prefix) => {
    for (;;) {
      const found = lines.find((l) => l.startsWith(prefix));
      if (found) return found.slice(prefix.length).trim();
      const exit = await Promise.race([exited.then((e) => ({ exit: e })), new Promise((r) => waiters.push(r))]);
      if (exit?.exit) throw new Error(`server exited (${JSON.stringify(exit.exit)}) before printing "${prefix}"`);
    }
  };
  return { child, exited, line };
}

if (DATABASE_URL) {
  await check('crash drill: SIGKILL after the phase committed, the retry on a new process resumes (one row, one charge)', async () => {
    const table = `idem_rt_drill_${name}_${Date.now()}`;
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    await pool.query(`CREATE TABLE ${table} (id serial PRIMARY KEY, amount integer NOT NULL)`);
    await new PostgresStore({ client: pool, table: `${table}_keys` }).migrate();
    const key = randomUUID();
    try {
      const first = startServer(table, true);
      const port = Number(await first.line('listening'));
      const pending = post(port, key, { amount: 500 }).then(
        (r) => r.status,
        () => 'cut',
      );
      const heldId = Number(await first.line('held'));
      first.child.kill('SIGKILL');
      assert.equal((await first.exited).signal, 'SIGKILL');
      assert.equal(await pending, 'cut', 'the killed server never answered');

      const second = startServer(table, false);
      const port2 = Number(await second.line('listening'));
      // The first lease (1 s) must run out: until then the key answers 409 with Retry-After.
      let answer;
      for (let i = 0; i < 200; i++) {
        answer = await post(port2, key, { amount: 500 });
        if (answer.status !== 409) break;
        const after = Number(answer.headers.get('retry-after') ?? '1');
        await answer.text();
        await new Promise((r) => setTimeout(r, Math.min(after, 1) * 250));
      }
      assert.equal(answer.status, 201);
      const charge = await answer.json();
      assert.equal(charge.id, heldId, 'the retry resumed from the recovery point: the same charge');
      const { rows } = await pool.query(`SELECT count(*)::int AS n FROM ${table}`);
      assert.equal(rows[0].n, 1, 'one row: the phase did not run twice');
      second.child.kill('SIGTERM');
      await second.exited;
    } finally {
      await pool.query(`DROP TABLE IF EXISTS ${table}, ${table}_keys`).catch(() => {});
      await pool.end();
    }
  });
}

console.log(`# ${label}: ${failures === 0 ? 'all passed' : `${failures} failed`}`);
process.exit(failures === 0 ? 0 : 1);
