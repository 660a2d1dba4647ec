/**
 * The example payments API with REDIS_URL: claims and replays in Redis (a random key prefix),
 * business data and atomic phases in the example's database (real PostgreSQL when
 * DATABASE_URL is set, else a fresh PGlite directory). Real server processes, a real crash
 * (PAYMENTS_CRASH_AT=psp_unrecorded: SIGKILL after the PSP charged, before its result is
 * recorded), then the retry on a new process: one PSP charge, one local row, a replay.
 */
import { redisSkip } from './helpers/redis.js';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { REDIS_URL, randomPrefix, singleClients, dropPrefix } from './helpers/redis.js';

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
    env: { ...base, PORT: '0', HOST: '127.0.0.1', PSP_LATENCY_MS: '20', IDEM_COMPLETER_INTERVAL_MS: '0', ...env },
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
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
      if (m) {
        clearTimeout(timer);
        assert.match(output, /claims in Redis/);
        resolve({ url: m[1]!, child, exited });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    void exited.then(() => reject(new Error(`server exited before listening:\n${output}`)));
  });
}

const charge = (server: Server, apiKey: string, key: string, customer: string) =>
  fetch(`${server.url}/v1/charges`, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'idempotency-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ amount: 1999, currency: 'usd', customer }),
  }).then(async (r) => ({ status: r.status, replayed: r.headers.get('idempotent-replayed'), body: await r.text() }));

const pspCharges = async (server: Server, customer: string) =>
  ((await (await fetch(`${server.url}/v1/psp/charges`)).json()) as { data: Array<{ customer: string }> }).data.filter((c) => c.customer === customer);

describe('example payments API with REDIS_URL (claims in Redis, phases in the database)', { timeout: 300_000, skip: redisSkip }, () => {
  const prefix = randomPrefix();
  let dbEnv: Record<string, string>;
  let cleanupDb: () => Promise<void>;
  before(async () => {
    if (process.env.DATABASE_URL) {
      const name = `idem_pay_redis_${randomUUID().slice(0, 8)}`;
      const admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
      await admin.connect();
      await admin.query(`CREATE DATABASE "${name}"`);
      await admin.end();
      const url = new URL(process.env.DATABASE_URL);
      url.pathname = `/${name}`;
      dbEnv = { DATABASE_URL: url.toString() };
      cleanupDb = async () => {
        const a = new pg.Client({ connectionString: process.env.DATABASE_URL });
        await a.connect();
        await a.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
        await a.end();
      };
    } else {
      const dir = mkdtempSync(join(tmpdir(), 'idem-pay-redis-'));
      dbEnv = { IDEM_DATA_DIR: dir };
      cleanupDb = async () => rmSync(dir, { recursive: true, force: true });
    }
  });
  after(async () => {
    await cleanupDb();
    const t = await singleClients[0]!.open();
    await dropPrefix(t, prefix);
    await t.close();
  });
  const env = (extra: Record<string, string> = {}) => ({ ...dbEnv, REDIS_URL, IDEM_REDIS_PREFIX: prefix, ...extra });

  it('crash after the PSP charged: the retry on a new process resumes, one PSP charge, then replays; parallel duplicates run once', async () => {
    const apiKey = `sk_test_${randomUUID().slice(0, 8)}`;
    const customer = `cus_${randomUUID().slice(0, 8)}`;
    const key = `order-${randomUUID().slice(0, 8)}`;
    // Lease 1 s so the retry may take the crashed worker's key over soon.
    const crashing = await start(env({ PAYMENTS_CRASH_AT: 'psp_unrecorded', IDEM_LEASE_MS: '1000' }));
    await charge(crashing, apiKey, key, customer).catch(() => undefined); // the process dies mid-request
    await crashing.exited;

    const server = await start(env({ IDEM_LEASE_MS: '1000' }));
    try {
      let first = await charge(server, apiKey, key, customer);
      for (const started = performance.now(); first.status === 409 && performance.now() - started < 30_000; ) {
        await new Promise((r) => setTimeout(r, 200)); // the crashed worker's lease runs out
        first = await charge(server, apiKey, key, customer);
      }
      assert.equal(first.status, 201, first.body);
      assert.equal(first.replayed, null);
      const replay = await charge(server, apiKey, key, customer);
      assert.equal(replay.status, 201);
      assert.equal(replay.replayed, 'true');
      assert.equal(replay.body, first.body, 'byte for byte');
      assert.equal((await pspCharges(server, customer)).length, 1, 'one PSP charge despite the crash after charging');

      const burstCustomer = `cus_${randomUUID().slice(0, 8)}`;
      const burstKey = `burst-${randomUUID().slice(0, 8)}`;
      const answers = await Promise.all(Array.from({ length: 30 }, () => charge(server, apiKey, burstKey, burstCustomer)));
      assert.ok(
        answers.every((a) => a.status === 201 || a.status === 409),
        answers.map((a) => a.status).join(','),
      );
      assert.equal(answers.filter((a) => a.status === 201 && a.replayed === null).length, 1, 'one fresh 201');
      assert.equal((await pspCharges(server, burstCustomer)).length, 1);
    } finally {
      server.child.kill('SIGKILL');
      await server.exited;
    }
  });
});
