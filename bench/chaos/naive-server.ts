/**
 * The naive baseline, for the chaos harness only (never part of the library): the
 * idempotency check most code bases start with. SELECT the key; if absent, do the work and
 * INSERT the key with the response. No claim, no lease, no fencing token, no recovery
 * points. The PSP call is keyed by the local charge id, as code that does not propagate the
 * client's key downstream does.
 *
 * It serves the same `POST /v1/charges` wire format and crash points as the example
 * (PAYMENTS_CRASH_RATE), on the same `charges` and `psp_charges` tables, so the harness
 * checks it with the same invariants. Concurrent duplicates both pass the SELECT; a crash
 * or a PSP failure after the work started leaves no trace the retry can see.
 *
 * Its table `naive_keys (scope, key, status, body)` is created by the harness.
 *
 * Environment: DATABASE_URL (required; PostgreSQL, or MySQL / MariaDB with a mysql:// URL), PORT (0), PG_POOL_MAX (5), PSP_LATENCY_MS (50),
 * PSP_FAILURE_RATE (0), PAYMENTS_CRASH_RATE (0).
 */
import { createHash, randomUUID } from 'node:crypto';
import http from 'node:http';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { mysqlDatabase } from '../../examples/payments/mysql.js';
import { FakePsp } from '../../examples/payments/psp.js';
import type { Queryable } from '../../src/postgres/index.js';
import { parseChargeRequest } from '../../examples/payments/validate.js';

const env = process.env;
const onMySql = /^(mysql|mariadb):/i.test(env.DATABASE_URL ?? '');
const pool: Queryable = onMySql
  ? mysqlDatabase(mysql.createPool({ uri: env.DATABASE_URL!.replace(/^mariadb:/i, 'mysql:'), connectionLimit: Number(env.PG_POOL_MAX ?? 5) }))
  : new pg.Pool({ connectionString: env.DATABASE_URL, max: Number(env.PG_POOL_MAX ?? 5) }).on('error', () => undefined);
/** The two statements on its own table (the rest is the same SQL on both servers, `$n` turned into `?` on MySQL). */
const SEEN = onMySql
  ? 'SELECT status, body FROM naive_keys WHERE scope = $1 AND `key` = $2'
  : 'SELECT status, body FROM naive_keys WHERE scope = $1 AND key = $2';
const REMEMBER = onMySql
  ? 'INSERT IGNORE INTO naive_keys (scope, `key`, status, body) VALUES ($1, $2, 201, $3)'
  : 'INSERT INTO naive_keys (scope, key, status, body) VALUES ($1, $2, 201, $3) ON CONFLICT DO NOTHING';
const psp = new FakePsp(pool, { latencyMs: Number(env.PSP_LATENCY_MS ?? 50), failureRate: Number(env.PSP_FAILURE_RATE ?? 0) });
const crashRate = Number(env.PAYMENTS_CRASH_RATE ?? 0);
const crash = (point: string) => {
  if (crashRate > 0 && Math.random() < crashRate) {
    console.log(`payments-crash ${point}`);
    process.kill(process.pid, 'SIGKILL');
  }
};

async function charge(tenant: string, key: string, contentType: string | undefined, bytes: Uint8Array): Promise<{ status: number; body: Buffer }> {
  // 1. Check: has this key been seen? (no lock, no claim)
  const seen = await pool.query(SEEN, [tenant, key]);
  if (seen.rows[0]) return { status: Number(seen.rows[0].status), body: seen.rows[0].body as Buffer };
  const parsed = parseChargeRequest(contentType, bytes);
  if (!parsed.ok) return { status: 400, body: Buffer.from(JSON.stringify({ detail: parsed.detail })) };
  const req = parsed.value;
  // 2. Work.
  const id = 'ch_' + randomUUID().replaceAll('-', '');
  await pool.query(`INSERT INTO charges (id, tenant, idempotency_key, amount, currency, customer) VALUES ($1, $2, $3, $4, $5, $6)`, [
    id,
    tenant,
    key,
    req.amount,
    req.currency,
    req.customer,
  ]);
  crash('after_charge_created');
  const paid = await psp.charge({ idempotencyKey: id, amount: req.amount, currency: req.currency, customer: req.customer });
  crash('after_psp');
  await pool.query(`UPDATE charges SET status = 'succeeded', psp_charge_id = $2 WHERE id = $1`, [id, paid.id]);
  const body = Buffer.from(
    JSON.stringify({ id, object: 'charge', amount: req.amount, currency: req.currency, customer: req.customer, status: 'succeeded', psp_charge_id: paid.id }),
  );
  // 3. Remember the key (a duplicate that raced us just loses its INSERT, after doing the work).
  await pool.query(REMEMBER, [tenant, key, body]);
  crash('in_finish');
  return { status: 201, body };
}

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    if (req.method === 'GET' && req.url === '/healthz') return void res.writeHead(200).end('{"ok":true}');
    const auth = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '');
    const key = req.headers['idempotency-key'];
    if (req.method !== 'POST' || req.url !== '/v1/charges' || !auth || typeof key !== 'string') return void res.writeHead(400).end();
    const tenant = 'tenant:' + createHash('sha256').update(auth[1]!).digest('base64url');
    charge(tenant, key, req.headers['content-type'], new Uint8Array(Buffer.concat(chunks))).then(
      (out) => res.writeHead(out.status, { 'content-type': 'application/json' }).end(out.body),
      () => res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":"failed, retry"}'),
    );
  });
});
server.listen(Number(env.PORT ?? 0), '127.0.0.1', () => {
  console.log(`naive payments listening on http://127.0.0.1:${(server.address() as { port: number }).port}`);
});
