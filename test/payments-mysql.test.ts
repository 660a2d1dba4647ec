/**
 * The example payments API on MySQL / MariaDB (`DATABASE_URL=mysql://…`, issue 29): a real
 * server process on a database of its own on MYSQL_URL's server. A charge (201, one PSP charge,
 * one local row readable through GET), its replay (byte for byte), the same key with another
 * body (422); a crash after the PSP charged, finished by `idem complete --database-url mysql://…`
 * with the example's completer, then replayed to the late retry.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { Pool } from 'mysql2/promise';
import { idem } from './helpers/cli.js';
import { openMySqlDatabase } from './helpers/mysql-stores.js';
import type { Database } from './helpers/payments/databases.js';
import { type Server, startServer } from './helpers/payments/servers.js';
import { needs } from './helpers/services.js';

/** One `idem complete` pass (a real CLI process) with the example's completer; its JSON report. */
async function idemComplete(url: string): Promise<{ found: number; completed: number }> {
  const args = ['complete', '--app', 'examples/payments/complete.ts', '--database-url', url, '--json'];
  const run = await idem(args, { IDEM_LEASE_MS: '1000', IDEM_COMPLETER_GRACE_MS: '0', PSP_LATENCY_MS: '0' });
  assert.equal(run.code, 0, run.stdout + run.stderr);
  return JSON.parse(run.stdout.trim().split('\n').at(-1)!) as { found: number; completed: number };
}

const charge = (server: Server, apiKey: string, key: string, customer: string, amount = 1999) =>
  fetch(`${server.url}/v1/charges`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'idempotency-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ amount, currency: 'usd', customer, metadata: { order: 'o-1' } }),
  }).then(async (r) => ({ status: r.status, replayed: r.headers.get('idempotent-replayed'), body: await r.text() }));

describe('example payments API on MySQL (DATABASE_URL=mysql://…)', { timeout: 300_000, skip: needs('MYSQL_URL') }, () => {
  let db: { pool: Pool; url: string; close(): Promise<void> };
  /** The server's database (the helpers' shape; `inspect` is not used here). */
  let database: Database;
  before(async () => {
    db = await openMySqlDatabase({ connectionLimit: 2 });
    database = { env: { DATABASE_URL: db.url, IDEM_COMPLETER_INTERVAL_MS: '0' }, inspect: () => Promise.reject(new Error('not used')) };
  });
  after(async () => {
    await db?.close();
  });
  const count = async (sql: string, values: unknown[]) => Number(((await db.pool.query(sql, values))[0] as Array<{ n: number }>)[0]!.n);

  it('a charge, its replay byte for byte, 422 on another body; a crash after the PSP charged is finished by idem complete and replayed', async () => {
    const apiKey = `sk_test_${randomUUID().slice(0, 8)}`;
    const customer = `cus_${randomUUID().slice(0, 8)}`;
    const key = `order-${randomUUID().slice(0, 8)}`;
    const server = await startServer(database);
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
      await server.stop();
    }

    // A crash after the PSP charged, before idem recorded it; the client never retries in time.
    // `idem complete --database-url mysql://…` with the example's completer finishes the charge
    // from its recovery point (the derived key keeps the PSP at one charge); the late retry replays it.
    const crashKey = `crash-${randomUUID().slice(0, 8)}`;
    const crashCustomer = `cus_${randomUUID().slice(0, 8)}`;
    const crashing = await startServer(database, { PAYMENTS_CRASH_AT: 'psp_unrecorded', IDEM_LEASE_MS: '1000' });
    await charge(crashing, apiKey, crashKey, crashCustomer).catch(() => undefined);
    await crashing.exited;
    let report: { found: number; completed: number } = { found: 0, completed: 0 };
    // The pass finds the key once its lease (1 s) has ended: passes until one completes it.
    for (const started = performance.now(); report.completed === 0 && performance.now() - started < 60_000; ) {
      report = await idemComplete(db.url);
      if (report.completed === 0) await new Promise((r) => setTimeout(r, 250));
    }
    assert.equal(report.completed, 1, JSON.stringify(report));
    assert.equal(await count('SELECT COUNT(*) AS n FROM psp_charges WHERE customer = ?', [crashCustomer]), 1, 'one PSP charge despite the crash');
    assert.equal(await count("SELECT COUNT(*) AS n FROM charges WHERE customer = ? AND status = 'succeeded'", [crashCustomer]), 1, 'one local row, finished');
    const late = await startServer(database, { IDEM_MIGRATE: '0' });
    try {
      const retried = await charge(late, apiKey, crashKey, crashCustomer);
      assert.equal(retried.status, 201, retried.body);
      assert.equal(retried.replayed, 'true', 'the completed response is replayed');
    } finally {
      await late.stop();
    }
  });
});
