/**
 * The example payments API on MySQL / MariaDB (`DATABASE_URL=mysql://…`, issue 29): a real
 * server process on a database of its own on MYSQL_URL's server. A charge (201, one PSP charge,
 * one local row readable through GET), its replay (byte for byte), the same key with another
 * body (422); a crash after the PSP charged, finished by `idem complete --database-url mysql://…`
 * with the example's completer, then replayed to the late retry.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import type { Pool } from 'mysql2/promise';
import { openMySqlDatabase } from './helpers/mysql-stores.js';
import { needs } from './helpers/services.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const SERVER = join(ROOT, 'examples/payments/server.ts');
const START_TIMEOUT_MS = 90_000;
const SCRUBBED = /^(DATABASE_URL|REDIS_URL|IDEM_|PSP_|PAYMENTS_|PORT$|HOST$|NODE_TEST_CONTEXT$|NODE_OPTIONS$)/;

interface Server {
  url: string;
  child: ChildProcess;
  exited: Promise<unknown>;
}

function start(env: Record<string, string>): Promise<Server> {
  const base: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !SCRUBBED.test(k)) base[k] = v;
  const child = spawn(process.execPath, ['--import', 'tsx', SERVER], {
    cwd: ROOT,
    env: { ...base, PORT: '0', HOST: '127.0.0.1', PSP_LATENCY_MS: '10', IDEM_COMPLETER_INTERVAL_MS: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  let output = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server did not start:\n${output}`));
    }, START_TIMEOUT_MS);
    const onData = (d: Buffer) => {
      output += d.toString();
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+) \(mysql: /.exec(output);
      if (m) {
        clearTimeout(timer);
        resolve({ url: m[1]!, child, exited });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`server exited before listening:\n${output}`));
    });
  });
}

/** One `idem complete` pass (a real CLI process) with the example's completer; its JSON report. */
function idemComplete(url: string): Promise<string> {
  const base: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !SCRUBBED.test(k)) base[k] = v;
  const args = ['--import', 'tsx', join(ROOT, 'src/cli/main.ts'), 'complete', '--app', join(ROOT, 'examples/payments/complete.ts')];
  const child = spawn(process.execPath, [...args, '--database-url', url, '--json'], {
    cwd: ROOT,
    env: { ...base, IDEM_LEASE_MS: '1000', IDEM_COMPLETER_GRACE_MS: '0', PSP_LATENCY_MS: '0' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((resolve, reject) =>
    child.once('exit', (code) => (code === 0 ? resolve(out.trim().split('\n').at(-1)!) : reject(new Error(`idem complete exited ${code}:\n${out}${err}`)))),
  );
}

const charge = (server: Server, apiKey: string, key: string, customer: string, amount = 1999) =>
  fetch(`${server.url}/v1/charges`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'idempotency-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ amount, currency: 'usd', customer, metadata: { order: 'o-1' } }),
  }).then(async (r) => ({ status: r.status, replayed: r.headers.get('idempotent-replayed'), body: await r.text() }));

describe('example payments API on MySQL (DATABASE_URL=mysql://…)', { timeout: 300_000, skip: needs('MYSQL_URL') }, () => {
  let db: { pool: Pool; url: string; close(): Promise<void> };
  before(async () => {
    db = await openMySqlDatabase({ connectionLimit: 2 });
  });
  after(async () => {
    await db?.close();
  });
  const count = async (sql: string, values: unknown[]) => Number(((await db.pool.query(sql, values))[0] as Array<{ n: number }>)[0]!.n);

  it('a charge, its replay byte for byte, 422 on another body; a crash after the PSP charged is finished by idem complete and replayed', async () => {
    const apiKey = `sk_test_${randomUUID().slice(0, 8)}`;
    const customer = `cus_${randomUUID().slice(0, 8)}`;
    const key = `order-${randomUUID().slice(0, 8)}`;
    const server = await start({ DATABASE_URL: db.url });
    try {
      const first = await charge(server, apiKey, key, customer);
      assert.equal(first.status, 201, first.body);
      assert.equal(first.replayed, null);
      const created = JSON.parse(first.body) as { id: string; status: string; metadata: unknown; created: number; amount: number };
      assert.equal(created.status, 'succeeded');
      assert.deepEqual(created.metadata, { order: 'o-1' });
      assert.ok(Math.abs(created.created - Date.now() / 1000) < 600, `created is epoch seconds: ${created.created}`);

      const replay = await charge(server, apiKey, key, customer);
      assert.equal(replay.status, 201);
      assert.equal(replay.replayed, 'true');
      assert.equal(replay.body, first.body, 'byte for byte');

      const other = await charge(server, apiKey, key, customer, 2999);
      assert.equal(other.status, 422, other.body);
      assert.match(other.body, /idempotency-key-reused/);

      // The local row as GET shows it, and one PSP charge; idem's row in MySqlStore's table.
      const got = await fetch(`${server.url}/v1/charges/${created.id}`, { headers: { authorization: `Bearer ${apiKey}` } });
      assert.equal(got.status, 200);
      const shown = (await got.json()) as Record<string, unknown>;
      assert.equal(shown.amount, 1999);
      assert.equal(shown.status, 'succeeded');
      assert.deepEqual(shown.metadata, { order: 'o-1' });
      assert.equal(shown.created, created.created);
      assert.equal(await count('SELECT COUNT(*) AS n FROM psp_charges WHERE customer = ?', [customer]), 1);
      assert.equal(await count('SELECT COUNT(*) AS n FROM charges WHERE customer = ?', [customer]), 1);
      assert.equal(await count("SELECT COUNT(*) AS n FROM idempotency_keys WHERE `key` = ? AND state = 'done'", [key]), 1);
    } finally {
      server.child.kill('SIGKILL');
      await server.exited;
    }

    // A crash after the PSP charged, before idem recorded it; the client never retries in time.
    // `idem complete --database-url mysql://…` with the example's completer finishes the charge
    // from its recovery point (the derived key keeps the PSP at one charge); the late retry replays it.
    const crashKey = `crash-${randomUUID().slice(0, 8)}`;
    const crashCustomer = `cus_${randomUUID().slice(0, 8)}`;
    const crashing = await start({ DATABASE_URL: db.url, PAYMENTS_CRASH_AT: 'psp_unrecorded', IDEM_LEASE_MS: '1000' });
    await charge(crashing, apiKey, crashKey, crashCustomer).catch(() => undefined);
    await crashing.exited;
    let report: { found: number; completed: number } = { found: 0, completed: 0 };
    // The pass finds the key once its lease (1 s) has ended: passes until one completes it.
    for (const started = performance.now(); report.completed === 0 && performance.now() - started < 60_000; ) {
      report = JSON.parse(await idemComplete(db.url)) as typeof report;
      if (report.completed === 0) await new Promise((r) => setTimeout(r, 250));
    }
    assert.equal(report.completed, 1, JSON.stringify(report));
    assert.equal(await count('SELECT COUNT(*) AS n FROM psp_charges WHERE customer = ?', [crashCustomer]), 1, 'one PSP charge despite the crash');
    assert.equal(await count("SELECT COUNT(*) AS n FROM charges WHERE customer = ? AND status = 'succeeded'", [crashCustomer]), 1, 'one local row, finished');
    const late = await start({ DATABASE_URL: db.url, IDEM_MIGRATE: '0' });
    try {
      const retried = await charge(late, apiKey, crashKey, crashCustomer);
      assert.equal(retried.status, 201, retried.body);
      assert.equal(retried.replayed, 'true', 'the completed response is replayed');
    } finally {
      late.child.kill('SIGKILL');
      await late.exited;
    }
  });
});
