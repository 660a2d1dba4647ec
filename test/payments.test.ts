/**
 * End-to-end tests of the example payments API (examples/payments): the real server runs as
 * child processes (`node --import tsx examples/payments/server.ts`) and is driven over real
 * TCP connections, including crashes (the server SIGKILLs itself at a named point), a frozen
 * stale worker (SIGSTOP / SIGCONT), PSP failures, and the official `stripe` SDK behind a proxy
 * that resets the connection after the server committed.
 *
 * Backends: embedded PGlite always (a fresh data directory per server, copied from a template
 * initialised once; a restarted server reopens the crashed server's directory), and real
 * PostgreSQL when DATABASE_URL is set (a fresh database `idem_payments_<random>` for this file,
 * dropped at the end). Tests isolate themselves by unique API keys, idempotency keys and
 * customers, and count PSP charges per customer through `GET /v1/psp/charges`.
 *
 * PGlite admits one process per data directory, so on PGlite the local `charges` table is read
 * directly only while no server has the directory open (after a crash, or after stopping the
 * server), and the two-servers-at-once scenario (stale worker) runs on PostgreSQL only.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import Stripe from 'stripe';
import { deriveKey } from '../src/core/derived-key.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SERVER = 'examples/payments/server.ts';
const SERVER_START_TIMEOUT_MS = 45_000;
const TEST_TIMEOUT_MS = 120_000;
/** PSP latency in test 3b: the first request stays in flight for half of it after its PSP charge shows. */
const PSP_3B_LATENCY_MS = 6000;

// ---------------------------------------------------------------------------------------------
// Small utilities

const rand = (bytes = 6) => randomBytes(bytes).toString('hex');
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls `fn` until `ok` accepts its value; fails after `timeoutMs` with `what`. */
async function until<T>(what: string, fn: () => Promise<T>, ok: (value: T) => boolean, timeoutMs = 15_000, intervalMs = 25): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  for (;;) {
    last = await fn();
    if (ok(last)) return last;
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}; last value: ${JSON.stringify(last)}`);
    await sleep(intervalMs);
  }
}

/** Settles a promise into a value or an error, so a pending request can be checked later. */
function settle<T>(promise: Promise<T>): Promise<{ ok: true; value: T } | { ok: false; error: unknown }> {
  return promise.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );
}

// ---------------------------------------------------------------------------------------------
// HTTP over fresh TCP connections (no keep-alive: every request is its own connection)

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** Exact body bytes. */
  body: Buffer;
  json(): unknown;
}

function request(
  base: string,
  method: string,
  path: string,
  options: { headers?: Record<string, string>; body?: string | Buffer; chunked?: boolean } = {},
): Promise<Reply> {
  const url = new URL(path, base);
  const body = options.body === undefined ? undefined : Buffer.from(options.body);
  const chunked = options.chunked === true && body !== undefined;
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      {
        method,
        agent: false,
        headers: {
          ...(chunked ? { 'transfer-encoding': 'chunked' } : body ? { 'content-length': String(body.length) } : {}),
          ...options.headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', reject);
        res.on('end', () => {
          const bytes = Buffer.concat(chunks);
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: bytes,
            json: () => JSON.parse(bytes.toString('utf8')),
          });
        });
      },
    );
    req.on('error', reject);
    if (chunked) {
      // No Content-Length: the server only learns the size by reading the stream.
      for (let i = 0; i < body.length; i += 16 * 1024) req.write(body.subarray(i, i + 16 * 1024));
      req.end();
    } else req.end(body);
  });
}

interface ChargeBody {
  id: string;
  object: string;
  amount: number;
  currency: string;
  customer: string;
  status: string;
  psp_charge_id: string;
  metadata: Record<string, string>;
  created: number;
}

interface PspCharge {
  id: string;
  idempotency_key: string;
  amount: number;
  currency: string;
  customer: string;
}

interface PostOptions {
  apiKey?: string | null;
  key?: string | null;
  /** An object is sent as JSON; a string as is. */
  body: unknown;
  contentType?: string;
  /** Send the body chunked, without Content-Length. */
  chunked?: boolean;
}

function postCharge(server: Server, o: PostOptions): Promise<Reply> {
  const headers: Record<string, string> = { 'content-type': o.contentType ?? 'application/json' };
  if (o.apiKey !== null) headers.authorization = `Bearer ${o.apiKey ?? 'sk_test_default'}`;
  if (o.key !== null && o.key !== undefined) headers['idempotency-key'] = o.key;
  const body = typeof o.body === 'string' ? o.body : JSON.stringify(o.body);
  return request(server.url, 'POST', '/v1/charges', { headers, body, chunked: o.chunked });
}

async function pspCharges(server: Server, customer: string): Promise<PspCharge[]> {
  const res = await request(server.url, 'GET', '/v1/psp/charges');
  assert.equal(res.status, 200, `GET /v1/psp/charges: ${res.body.toString()}`);
  const data = (res.json() as { data: PspCharge[] }).data;
  assert.ok(Array.isArray(data), `GET /v1/psp/charges: data is not an array: ${res.body.toString()}`);
  return data.filter((c) => c.customer === customer);
}

async function getCharge(server: Server, apiKey: string, id: string): Promise<Reply> {
  return request(server.url, 'GET', `/v1/charges/${encodeURIComponent(id)}`, { headers: { authorization: `Bearer ${apiKey}` } });
}

/** The local ledger row through the API: `GET /v1/charges/:id` agrees with the 201 `charge`. */
async function assertLocalCharge(server: Server, apiKey: string, charge: ChargeBody): Promise<void> {
  const got = await getCharge(server, apiKey, charge.id);
  assert.equal(got.status, 200, `GET /v1/charges/${charge.id}: ${got.body.toString()}`);
  const row = got.json() as ChargeBody;
  assert.deepEqual(
    {
      id: row.id,
      amount: row.amount,
      currency: row.currency,
      customer: row.customer,
      status: row.status,
      psp: row.psp_charge_id,
      metadata: row.metadata,
      created: row.created,
    },
    {
      id: charge.id,
      amount: charge.amount,
      currency: charge.currency,
      customer: charge.customer,
      status: 'succeeded',
      psp: charge.psp_charge_id,
      metadata: charge.metadata,
      // Both come from the database's created_at: the POST and the GET show the same second.
      created: charge.created,
    },
  );
}

const PROBLEM = 'urn:idem:problem:';

function assertProblem(res: Reply, status: number, type: string, message = ''): Record<string, unknown> {
  assert.equal(res.status, status, `${message} expected ${status}, got ${res.status}: ${res.body.toString()}`);
  assert.match(String(res.headers['content-type']), /^application\/problem\+json/, message);
  const problem = res.json() as Record<string, unknown>;
  assert.equal(problem.type, type, message);
  assert.equal(problem.status, status, message);
  assert.equal(typeof problem.title, 'string', message);
  return problem;
}

function assertCreated(res: Reply, message = ''): ChargeBody {
  assert.equal(res.status, 201, `${message} expected 201, got ${res.status}: ${res.body.toString()}`);
  assert.match(String(res.headers['content-type']), /^application\/json/);
  const charge = res.json() as ChargeBody;
  assert.match(charge.id, /^ch_[0-9a-f]{32}$/);
  assert.equal(charge.object, 'charge');
  assert.equal(charge.status, 'succeeded');
  assert.match(charge.psp_charge_id, /^py_[0-9a-f]{32}$/);
  assert.equal(res.headers.location, `/v1/charges/${charge.id}`);
  return charge;
}

function assertFresh(res: Reply, message = ''): ChargeBody {
  const charge = assertCreated(res, message);
  assert.equal(res.headers['idempotent-replayed'], undefined, `${message} a first execution is not marked as a replay`);
  return charge;
}

/** A replay: same status and byte-identical body as `original`, marked `Idempotent-Replayed: true`. */
function assertReplayOf(res: Reply, original: Reply, message = ''): void {
  assert.equal(res.status, original.status, `${message} replay status: ${res.body.toString()}`);
  assert.equal(res.headers['idempotent-replayed'], 'true', `${message} replay header`);
  assert.ok(res.body.equals(original.body), `${message} replay body differs:\n${res.body}\nvs\n${original.body}`);
  assert.equal(res.headers['content-type'], original.headers['content-type'], message);
  assert.equal(res.headers.location, original.headers.location, message);
}

/** Retries until a 201; every answer in between must pass `between` (e.g. a 409 or 500 problem). */
async function retryUntilCreated(
  send: () => Promise<Reply>,
  between: (res: Reply, attempt: number) => void,
  maxAttempts = 30,
  timeoutMs = 30_000,
): Promise<{ res: Reply; attempts: number; statuses: number[] }> {
  const deadline = Date.now() + timeoutMs;
  const statuses: number[] = [];
  for (let attempt = 1; attempt <= maxAttempts && Date.now() < deadline; attempt++) {
    const res = await send();
    statuses.push(res.status);
    if (res.status === 201) return { res, attempts: attempt, statuses };
    between(res, attempt);
    const retryAfter = Number(res.headers['retry-after']);
    // Honour Retry-After loosely (it is in whole seconds), but poll faster to keep tests short.
    await sleep(Number.isFinite(retryAfter) && retryAfter > 0 ? Math.min(retryAfter * 1000, 200) : 50);
  }
  assert.fail(`no 201 after ${statuses.length} attempts: statuses ${statuses.join(',')}`);
}

function assertInProgress(res: Reply, message = ''): void {
  assertProblem(res, 409, PROBLEM + 'request-in-progress', message);
  const retryAfter = Number(res.headers['retry-after']);
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1, `${message} 409 needs Retry-After, got ${res.headers['retry-after']}`);
}

// ---------------------------------------------------------------------------------------------
// Servers and databases

interface Server {
  url: string;
  port: number;
  child: ChildProcess;
  /** Resolves when the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  output(): string;
  /** SIGTERM, then SIGKILL after 5 s; resolves when the process is gone. */
  stop(): Promise<void>;
}

const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

/** Environment variables of the parent that must not leak into a server. */
const SCRUBBED = /^(DATABASE_URL|IDEM_|PSP_|PAYMENTS_|PORT$|HOST$|PG_POOL_MAX$|NODE_TEST_CONTEXT$|NODE_OPTIONS$)/;

function serverEnv(db: Database, extraEnv: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) if (value !== undefined && !SCRUBBED.test(name)) env[name] = value;
  return Object.assign(env, db.env, { PORT: '0', HOST: '127.0.0.1', PSP_LATENCY_MS: '20' }, extraEnv);
}

/** Runs a server that is expected not to start: resolves with its exit and its whole output. */
function runUntilExit(db: Database, extraEnv: Record<string, string>): Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', SERVER], { cwd: ROOT, env: serverEnv(db, extraEnv), stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), SERVER_START_TIMEOUT_MS);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      children.delete(child);
      resolve({ code, signal, output });
    });
  });
}

function startServer(db: Database, extraEnv: Record<string, string> = {}): Promise<Server> {
  const env = serverEnv(db, extraEnv);
  const child = spawn(process.execPath, ['--import', 'tsx', SERVER], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  let output = '';
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      children.delete(child);
      resolve({ code, signal });
    });
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server did not start within ${SERVER_START_TIMEOUT_MS} ms:\n${output}`));
    }, SERVER_START_TIMEOUT_MS);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /listening on (http:\/\/127\.0\.0\.1:(\d+))/.exec(output);
      if (match && !server) {
        clearTimeout(timer);
        server = {
          url: match[1]!,
          port: Number(match[2]),
          child,
          exited,
          output: () => output,
          async stop() {
            if (child.exitCode !== null || child.signalCode !== null) return;
            child.kill('SIGTERM');
            const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
            await exited;
            clearTimeout(timer);
          },
        };
        resolve(server);
      }
    };
    let server: Server | undefined;
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then(({ code, signal }) => {
      if (!server) {
        clearTimeout(timer);
        reject(new Error(`server exited (code ${code}, signal ${signal}) before listening:\n${output}`));
      }
    });
  });
}

/** Rows of a query, whichever driver ran it. */
type Rows = Array<Record<string, unknown>>;
/** Named statements run together by {@link Database.inspect}. */
type Statements = Record<string, { sql: string; params?: unknown[] }>;
type Results<S extends Statements> = { [K in keyof S]: Rows };

/** One database that servers are pointed at. */
interface Database {
  /** DATABASE_URL or IDEM_DATA_DIR for the server. */
  env: Record<string, string>;
  /**
   * Runs statements directly on the database, bypassing the API. On PGlite no server may have
   * the directory open (one process at a time): call it after a crash or a stop.
   */
  inspect<S extends Statements>(statements: S): Promise<Results<S>>;
}

interface Backend {
  name: 'pglite' | 'postgres';
  /** True when two servers (or a server and the test) can use one database at once. */
  multiProcess: boolean;
  setup(): Promise<void>;
  teardown(): Promise<void>;
  /** A database for a new scenario: PGlite a fresh directory, PostgreSQL this file's database. */
  database(): Database;
}

/**
 * Opens a PGlite directory in a short-lived child process, runs the statements and closes it.
 * Out of process because PGlite's start-up (and initdb on an empty directory) keeps a thread
 * busy for seconds, which would stall the timing-sensitive tests running concurrently here.
 */
const PGLITE_INSPECTOR = `
import { PGlite } from '@electric-sql/pglite';
const statements = JSON.parse(process.env.INSPECT_STATEMENTS);
const db = await PGlite.create(process.env.INSPECT_DIR);
const out = {};
try {
  for (const [name, { sql, params }] of Object.entries(statements)) out[name] = (await db.query(sql, params ?? [])).rows;
} finally {
  await db.close();
}
process.stdout.write(JSON.stringify(out));
`;

function pgliteInspect<S extends Statements>(dir: string, statements: S): Promise<Results<S>> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', PGLITE_INSPECTOR], {
      cwd: ROOT,
      env: { ...process.env, INSPECT_DIR: dir, INSPECT_STATEMENTS: JSON.stringify(statements) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.add(child);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      children.delete(child);
      if (code !== 0) return reject(new Error(`PGlite inspector failed on ${dir} (exit ${code}):\n${stderr}`));
      try {
        resolve(JSON.parse(stdout) as Results<S>);
      } catch (error) {
        reject(error);
      }
    });
  });
}

function pgliteBackend(): Backend {
  let root = '';
  let template = '';
  let n = 0;
  return {
    name: 'pglite',
    multiProcess: false,
    async setup() {
      root = mkdtempSync(join(tmpdir(), 'idem-payments-'));
      // initdb is the slow part of a fresh PGlite (seconds): do it once and copy the directory.
      template = join(root, 'template');
      await pgliteInspect(template, {});
    },
    async teardown() {
      if (root) rmSync(root, { recursive: true, force: true });
    },
    database() {
      const dir = join(root, `db${n++}`);
      cpSync(template, dir, { recursive: true });
      return { env: { IDEM_DATA_DIR: dir }, inspect: (statements) => pgliteInspect(dir, statements) };
    },
  };
}

function postgresBackend(adminUrl: string): Backend {
  const name = `idem_payments_${rand()}`;
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  let pool: pg.Pool | undefined;
  const admin = async (sql: string) => {
    const client = new pg.Client({ connectionString: adminUrl });
    await client.connect();
    try {
      await client.query(sql);
    } finally {
      await client.end();
    }
  };
  return {
    name: 'postgres',
    multiProcess: true,
    async setup() {
      await admin(`CREATE DATABASE "${name}"`);
      pool = new pg.Pool({ connectionString: url.toString(), max: 4 });
    },
    async teardown() {
      await pool?.end();
      await admin(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    },
    database() {
      return {
        env: { DATABASE_URL: url.toString() },
        async inspect<S extends Statements>(statements: S) {
          const out: Record<string, Rows> = {};
          for (const [name, { sql, params }] of Object.entries(statements)) out[name] = (await pool!.query(sql, params)).rows as Rows;
          return out as Results<S>;
        },
      };
    },
  };
}

/** The local ledger rows (`charges`) of one customer, oldest first. */
function localRows(customer: string) {
  return {
    sql: `SELECT id, tenant, idempotency_key, amount::float8 AS amount, status, psp_charge_id
          FROM charges WHERE customer = $1 ORDER BY created_at, id`,
    params: [customer],
  };
}

// ---------------------------------------------------------------------------------------------
// A TCP proxy that loses the first response: it forwards the first connection's request,
// reads the server's complete response (so the server has committed), then resets the client
// socket instead of forwarding it. Later connections pass through.

interface ResetProxy {
  port: number;
  /** The request line and Idempotency-Key of every connection's first request. */
  requests: Array<{ connection: number; requestLine: string; idempotencyKey: string | undefined }>;
  /** The response the first connection never delivered. */
  swallowed: Promise<{ status: number; body: Buffer }>;
  close(): Promise<void>;
}

async function startResetProxy(upstreamPort: number): Promise<ResetProxy> {
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const requests: ResetProxy['requests'] = [];
  let swallow!: (value: { status: number; body: Buffer }) => void;
  const swallowed = new Promise<{ status: number; body: Buffer }>((resolve) => (swallow = resolve));
  const server = net.createServer((client) => {
    const connection = connections++;
    const upstream = net.connect(upstreamPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => sockets.delete(s));
    }
    let head = Buffer.alloc(0);
    let recorded = false;
    client.on('data', (chunk: Buffer) => {
      if (!recorded) {
        head = Buffer.concat([head, chunk]);
        const end = head.indexOf('\r\n\r\n');
        if (end >= 0) {
          recorded = true;
          const lines = head.subarray(0, end).toString('latin1').split('\r\n');
          const keyLine = lines.find((l) => /^idempotency-key:/i.test(l));
          requests.push({ connection, requestLine: lines[0]!, idempotencyKey: keyLine?.replace(/^[^:]*:\s*/, '').trim() });
        }
      }
      upstream.write(chunk);
    });
    client.on('end', () => upstream.end());
    client.on('close', () => upstream.destroy());
    if (connection === 0) {
      let response = Buffer.alloc(0);
      upstream.on('data', (chunk: Buffer) => {
        response = Buffer.concat([response, chunk]);
        const complete = completeResponse(response);
        if (complete) {
          swallow(complete);
          client.resetAndDestroy();
          upstream.destroy();
        }
      });
    } else {
      upstream.pipe(client);
      upstream.on('close', () => client.destroy());
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    requests,
    swallowed,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** The status and body once `bytes` hold one complete HTTP/1.1 response, else undefined. */
function completeResponse(bytes: Buffer): { status: number; body: Buffer } | undefined {
  const end = bytes.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const lines = bytes.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(lines[0]!.split(' ')[1]);
  const header = (name: string) =>
    lines
      .find((l) => l.toLowerCase().startsWith(name + ':'))
      ?.slice(name.length + 1)
      .trim();
  const rest = bytes.subarray(end + 4);
  const length = header('content-length');
  if (length !== undefined) return rest.length >= Number(length) ? { status, body: rest.subarray(0, Number(length)) } : undefined;
  if (/chunked/i.test(header('transfer-encoding') ?? '')) {
    if (!rest.subarray(-5).equals(Buffer.from('0\r\n\r\n'))) return undefined;
    const body: Buffer[] = [];
    let at = 0;
    for (;;) {
      const nl = rest.indexOf('\r\n', at);
      const size = parseInt(rest.subarray(at, nl).toString('latin1'), 16);
      if (!size) break;
      body.push(rest.subarray(nl + 2, nl + 2 + size));
      at = nl + 2 + size + 2;
    }
    return { status, body: Buffer.concat(body) };
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// The tests

const backends: Backend[] = [pgliteBackend()];
if (process.env.DATABASE_URL) backends.push(postgresBackend(process.env.DATABASE_URL));

const T = { timeout: TEST_TIMEOUT_MS };

describe('example payments API, end to end', { concurrency: true }, () => {
  if (!process.env.DATABASE_URL) {
    test('postgres backend', { skip: 'DATABASE_URL is not set: PostgreSQL backend not run' }, () => undefined);
  }

  for (const backend of backends) {
    describe(backend.name, { concurrency: true }, () => {
      /** Every server this suite started, killed in `after`. */
      const servers = new Set<Server>();
      let sharedDb: Database;
      let sharedServer: Promise<Server> | undefined;

      const start = async (db: Database, env: Record<string, string> = {}) => {
        const server = await startServer(db, env);
        servers.add(server);
        return server;
      };
      /**
       * One long-lived server for the scenarios that need no special environment. Its PSP
       * takes 300 ms, so that concurrent duplicates find the first request in progress.
       */
      const shared = () => (sharedServer ??= start(sharedDb, { PSP_LATENCY_MS: '300' }));
      /** The local rows of a customer by direct SQL, where the database is shared with the running servers (PostgreSQL). */
      const liveRows = async (customer: string) => (backend.multiProcess ? (await sharedDb.inspect({ rows: localRows(customer) })).rows : undefined);

      before(async () => {
        await backend.setup();
        sharedDb = backend.database();
        void shared().catch(() => undefined); // warm up while other servers start
      }, { timeout: 90_000 });

      after(async () => {
        for (const server of servers) {
          server.child.kill('SIGKILL');
          await server.exited;
        }
        await backend.teardown();
      });

      test('1. a new key creates a charge; the retry (JSON keys reordered) replays it byte for byte; one PSP charge', T, async () => {
        const server = await shared();
        const apiKey = `sk_test_${rand()}`;
        const key = `order-${rand()}`;
        const customer = `cus_t1_${rand()}`;
        const first = await postCharge(server, {
          apiKey,
          key,
          body: { amount: 1999, currency: 'USD', customer, metadata: { order: '1001' } },
        });
        const charge = assertFresh(first);
        assert.deepEqual(
          { amount: charge.amount, currency: charge.currency, customer: charge.customer, metadata: charge.metadata },
          { amount: 1999, currency: 'usd', customer, metadata: { order: '1001' } },
        );
        assert.equal(typeof charge.created, 'number');

        const retry = await postCharge(server, {
          apiKey,
          key,
          body: `{ "metadata": {"order": "1001"}, "customer": ${JSON.stringify(customer)},\n  "currency": "USD", "amount": 1999.0 }`,
        });
        assertReplayOf(retry, first);

        const psp = await pspCharges(server, customer);
        assert.equal(psp.length, 1, 'exactly one PSP charge');
        assert.equal(psp[0]!.id, charge.psp_charge_id);
        assert.equal(psp[0]!.amount, 1999);
        assert.notEqual(psp[0]!.idempotency_key, key, 'the PSP gets a derived key, not the client key');

        await assertLocalCharge(server, apiKey, charge);
        const rows = await liveRows(customer);
        if (rows) assert.deepEqual(rows.map((r) => [r.id, r.status]), [[charge.id, 'succeeded']], 'exactly one local row');
      });

      test('2. 50 parallel identical requests: 201 or 409 (with Retry-After), one PSP charge, one local row; then a replay', T, async () => {
        const server = await shared();
        const apiKey = `sk_test_${rand()}`;
        const key = `burst-${rand()}`;
        const customer = `cus_t2_${rand()}`;
        const body = { amount: 4200, currency: 'eur', customer };
        const answers = await Promise.all(Array.from({ length: 50 }, () => postCharge(server, { apiKey, key, body })));

        const statuses = answers.map((r) => r.status);
        for (const res of answers) {
          if (res.status === 409) {
            assertInProgress(res);
            // The default Retry-After is 1 s (the lease left is ~60 s on this server).
            assert.equal(res.headers['retry-after'], '1', 'Retry-After of an in-progress 409');
          } else assert.equal(res.status, 201, `unexpected ${res.status}: ${res.body.toString()}`);
        }
        const created = answers.filter((r) => r.status === 201);
        const fresh = created.filter((r) => r.headers['idempotent-replayed'] === undefined);
        assert.equal(fresh.length, 1, `exactly one request executed (statuses ${statuses.join(',')})`);
        for (const res of created) if (res !== fresh[0]) assertReplayOf(res, fresh[0]!);
        assert.ok(statuses.includes(409), 'with 300 ms of PSP latency some duplicates must see the request in progress');

        const retry = await postCharge(server, { apiKey, key, body });
        assertReplayOf(retry, fresh[0]!);
        const charge = assertCreated(fresh[0]!);
        const psp = await pspCharges(server, customer);
        assert.deepEqual(
          psp.map((c) => c.id),
          [charge.psp_charge_id],
          'exactly one PSP charge',
        );

        await assertLocalCharge(server, apiKey, charge);
        const rows = await liveRows(customer);
        if (rows) assert.deepEqual(rows.map((r) => [r.id, r.status]), [[charge.id, 'succeeded']], 'exactly one local row');
      });

      test('3a. the same key with a different amount gets a 422 problem; the original still replays', T, async () => {
        const server = await shared();
        const apiKey = `sk_test_${rand()}`;
        const key = `mismatch-${rand()}`;
        const customer = `cus_t3a_${rand()}`;
        const first = await postCharge(server, { apiKey, key, body: { amount: 1000, currency: 'usd', customer } });
        assertFresh(first);
        const other = await postCharge(server, { apiKey, key, body: { amount: 2000, currency: 'usd', customer } });
        const problem = assertProblem(other, 422, PROBLEM + 'idempotency-key-reused');
        assert.equal((problem.error as { type?: string } | undefined)?.type, 'idempotency_error', 'Stripe-style error member');
        assertReplayOf(await postCharge(server, { apiKey, key, body: { amount: 1000, currency: 'usd', customer } }), first);
        assert.equal((await pspCharges(server, customer)).length, 1);
      });

      test('3b. a different amount while the first request is in flight gets 422, not 409; the original still replays', T, async () => {
        const db = backend.database();
        const server = await start(db, { PSP_LATENCY_MS: String(PSP_3B_LATENCY_MS) });
        const apiKey = `sk_test_${rand()}`;
        const key = `inflight-${rand()}`;
        const customer = `cus_t3b_${rand()}`;
        const body = { amount: 1000, currency: 'usd', customer };
        const firstP = settle(postCharge(server, { apiKey, key, body }));
        // Nothing else may touch the key until the first request provably holds it: a probe with
        // the same key sent too early could claim the key itself (it raced the first request and
        // won ~50% of the time under load). The fake PSP records its charge halfway through its
        // latency, and only an execution holding the key calls the PSP; so once this customer's
        // PSP charge is visible, the first request (the only one sent) has claimed the key and
        // stays in flight for another PSP_3B_LATENCY_MS / 2. Works on PGlite too, where the test
        // cannot read the server's database while it runs.
        await until('the first request to reach the PSP', () => pspCharges(server, customer), (c) => c.length === 1, 20_000, 20);
        assertInProgress(await postCharge(server, { apiKey, key, body }), 'the first request must still be running:');
        const mismatch = await postCharge(server, { apiKey, key, body: { ...body, amount: 1001 } });
        assertProblem(mismatch, 422, PROBLEM + 'idempotency-key-reused', 'mismatch while in flight:');
        // Still in flight after the 422: the mismatch was judged while the first was running.
        assertInProgress(await postCharge(server, { apiKey, key, body }), 'still in flight:');

        const first = await firstP;
        assert.ok(first.ok, `first request failed: ${String(!first.ok && first.error)}`);
        const charge = assertFresh(first.value);
        assert.equal(charge.amount, 1000);
        assertReplayOf(await postCharge(server, { apiKey, key, body }), first.value);
        assertProblem(await postCharge(server, { apiKey, key, body: { ...body, amount: 1001 } }), 422, PROBLEM + 'idempotency-key-reused');
        assert.equal((await pspCharges(server, customer)).length, 1);
        await server.stop();
      });

      test('4. missing key → 400; missing auth → 401 without consuming the key; invalid body → 400 without consuming the key', T, async () => {
        const server = await shared();
        const apiKey = `sk_test_${rand()}`;
        const customer = `cus_t4_${rand()}`;
        const body = { amount: 300, currency: 'usd', customer };

        assertProblem(await postCharge(server, { apiKey, key: null, body }), 400, PROBLEM + 'idempotency-key-missing');
        assert.equal((await pspCharges(server, customer)).length, 0, 'nothing ran without a key');

        const keyA = `auth-${rand()}`;
        const unauthenticated = await postCharge(server, { apiKey: null, key: keyA, body });
        assert.equal(unauthenticated.status, 401, unauthenticated.body.toString());
        assert.match(String(unauthenticated.headers['www-authenticate']), /^Bearer/);
        assert.equal((unauthenticated.json() as { status: number }).status, 401);
        assert.equal((await pspCharges(server, customer)).length, 0, 'nothing ran without credentials');
        const authenticated = await postCharge(server, { apiKey, key: keyA, body });
        const chargeA = assertFresh(authenticated, 'after a 401 the key is fresh:');
        assert.equal((await pspCharges(server, customer)).length, 1);

        const keyB = `invalid-${rand()}`;
        const customerB = `cus_t4b_${rand()}`;
        const invalid: Array<[unknown, string | undefined]> = [
          [{ amount: 0, currency: 'usd', customer: customerB }, 'amount'],
          [{ amount: 12.5, currency: 'usd', customer: customerB }, 'amount'],
          [{ amount: 500, currency: 'us', customer: customerB }, 'currency'],
          [{ amount: 500, currency: 'usd' }, 'customer'],
          [{ amount: 500, currency: 'usd', customer: customerB, color: 'red' }, 'color'],
          ['{"amount": 500, "currency": ', undefined],
        ];
        for (const [bad, param] of invalid) {
          const res = await postCharge(server, { apiKey, key: keyB, body: bad });
          const problem = assertProblem(res, 400, 'urn:idem:example:payments:invalid-request', `invalid body ${JSON.stringify(bad)}:`);
          if (param) assert.equal((problem.error as { param?: string }).param, param);
        }
        const fixed = await postCharge(server, { apiKey, key: keyB, body: { amount: 500, currency: 'usd', customer: customerB } });
        const chargeB = assertFresh(fixed, 'the fixed body with the same key runs:');
        assert.notEqual(chargeB.id, chargeA.id);
        assertReplayOf(await postCharge(server, { apiKey, key: keyB, body: { amount: 500, currency: 'usd', customer: customerB } }), fixed);
        assert.equal((await pspCharges(server, customerB)).length, 1);
      });

      test('5. two tenants with the same key and body get two charges, two PSP charges, each replays its own', T, async () => {
        const server = await shared();
        const alice = `sk_test_alice_${rand()}`;
        const bob = `sk_test_bob_${rand()}`;
        const key = `shared-key-${rand()}`;
        const customer = `cus_t5_${rand()}`;
        const body = { amount: 777, currency: 'usd', customer };
        const [a, b] = await Promise.all([postCharge(server, { apiKey: alice, key, body }), postCharge(server, { apiKey: bob, key, body })]);
        const chargeA = assertFresh(a!, 'alice:');
        const chargeB = assertFresh(b!, 'bob:');
        assert.notEqual(chargeA.id, chargeB.id);
        assert.notEqual(chargeA.psp_charge_id, chargeB.psp_charge_id);
        const psp = await pspCharges(server, customer);
        assert.equal(psp.length, 2);
        assert.equal(new Set(psp.map((c) => c.idempotency_key)).size, 2, 'derived PSP keys differ per tenant');

        assertReplayOf(await postCharge(server, { apiKey: alice, key, body }), a!, 'alice replay:');
        assertReplayOf(await postCharge(server, { apiKey: bob, key, body }), b!, 'bob replay:');
        assert.equal((await getCharge(server, bob, chargeA.id)).status, 404, "bob cannot read alice's charge");
        assert.equal((await getCharge(server, alice, chargeA.id)).status, 200);
        assert.equal((await pspCharges(server, customer)).length, 2);
      });

      test('6. Stripe form encoding with metadata[order]=42; reordered fields with the same key replay', T, async () => {
        const server = await shared();
        const apiKey = `sk_test_${rand()}`;
        const key = `form-${rand()}`;
        const customer = `cus_t6_${rand()}`;
        const form = 'application/x-www-form-urlencoded';
        const first = await postCharge(server, {
          apiKey,
          key,
          contentType: form,
          body: `amount=500&currency=usd&customer=${customer}&metadata[order]=42`,
        });
        const charge = assertFresh(first);
        assert.equal(charge.amount, 500);
        assert.equal(charge.currency, 'usd');
        assert.deepEqual(charge.metadata, { order: '42' });

        const reordered = await postCharge(server, {
          apiKey,
          key,
          contentType: `${form}; charset=utf-8`,
          body: `metadata%5Border%5D=42&customer=${customer}&currency=usd&amount=500`,
        });
        assertReplayOf(reordered, first);
        const changed = await postCharge(server, {
          apiKey,
          key,
          contentType: form,
          body: `amount=500&currency=usd&customer=${customer}&metadata[order]=43`,
        });
        assertProblem(changed, 422, PROBLEM + 'idempotency-key-reused');
        assert.equal((await pspCharges(server, customer)).length, 1);
        const got = await getCharge(server, apiKey, charge.id);
        assert.deepEqual((got.json() as ChargeBody).metadata, { order: '42' });
      });

      test('13. a key reused after retention makes a new charge and a new PSP charge (a new derived key), then replays that', T, async () => {
        const db = backend.database();
        // With the heartbeat on, retention must exceed maxExecutionMs (10 × lease) + lease.
        const server = await start(db, { IDEM_LEASE_MS: '200', IDEM_RETENTION_MS: '2500' });
        const apiKey = `sk_test_${rand()}`;
        const key = `reused-${rand()}`;
        const customer = `cus_t13_${rand()}`;
        const body = { amount: 1300, currency: 'usd', customer };
        // Retention counts from the claim, which happens after this instant (one clock: same host).
        const sentAt = Date.now();
        const firstRes = await postCharge(server, { apiKey, key, body });
        const first = assertFresh(firstRes, 'first use:');
        // Within retention the key replays; past it, the same request runs again.
        const { res: secondRes } = await retryUntilCreated(
          async () => {
            const res = await postCharge(server, { apiKey, key, body });
            if (res.status === 201 && res.headers['idempotent-replayed'] === 'true') {
              assertReplayOf(res, firstRes, 'within retention:');
              return { ...res, status: 299 }; // keep polling
            }
            return res;
          },
          (res) => assert.equal(res.status, 299, `within retention only replays: ${res.status} ${res.body.toString()}`),
          100,
          20_000,
        );
        assert.ok(Date.now() - sentAt >= 2400, `the key was reclaimed only once retention had run out (after ${Date.now() - sentAt} ms)`);
        const second = assertFresh(secondRes, 'the key reused past retention:');
        assert.notEqual(second.id, first.id, 'a new local charge');
        assert.notEqual(second.psp_charge_id, first.psp_charge_id, 'a new PSP charge, not the old one replayed by the PSP');
        const psp = await pspCharges(server, customer);
        assert.deepEqual(psp.map((c) => c.id).sort(), [first.psp_charge_id, second.psp_charge_id].sort(), 'two PSP charges for this customer');
        assert.notEqual(psp[0]!.idempotency_key, psp[1]!.idempotency_key, 'the two claims derived different PSP keys');
        assertReplayOf(await postCharge(server, { apiKey, key, body }), secondRes, 'the new charge replays:');
        await assertLocalCharge(server, apiKey, first);
        await assertLocalCharge(server, apiKey, second);

        await server.stop();
        const after = await db.inspect({
          rows: localRows(customer),
          key: { sql: `SELECT scope, claim_id::text AS claim_id FROM idempotency_keys WHERE key = $1`, params: [key] },
        });
        assert.deepEqual(after.rows.map((r) => r.id).sort(), [first.id, second.id].sort(), 'two local rows for the one key');
        const [row] = after.key;
        const secondPsp = psp.find((c) => c.id === second.psp_charge_id)!;
        assert.equal(secondPsp.idempotency_key, deriveKey(String(row!.scope), key, String(row!.claim_id), 'psp_charged'), "the new PSP key is the new claim's");
      });

      test('14. a body over 64 KiB gets 413 and leaves nothing stored; the same key then works', T, async () => {
        const server = await shared();
        const apiKey = `sk_test_${rand()}`;
        const customer = `cus_t14_${rand()}`;
        const big = { amount: 1400, currency: 'usd', customer, metadata: { pad: 'x'.repeat(100_000) } };
        const keys = { sized: `large-${rand()}`, chunked: `large-chunked-${rand()}` };
        for (const [how, key] of Object.entries(keys)) {
          const res = await postCharge(server, { apiKey, key, body: big, chunked: how === 'chunked' });
          assertProblem(res, 413, 'urn:idem:example:payments:too-large', `${how} 100 KB body:`);
          if (backend.multiProcess) {
            const { rows } = await sharedDb.inspect({ rows: { sql: `SELECT state FROM idempotency_keys WHERE key = $1`, params: [key] } });
            assert.deepEqual(rows, [], `${how}: a 413 stores no idempotency key`);
          }
        }
        assert.equal((await pspCharges(server, customer)).length, 0, 'nothing ran');
        // Had idem stored the large request (in any state), this request would get 409 or 422.
        for (const [how, key] of Object.entries(keys)) {
          const small = { amount: 1400, currency: 'usd', customer, metadata: { how } };
          assertFresh(await postCharge(server, { apiKey, key, body: small }), `${how}: the key is still free:`);
        }
        assert.equal((await pspCharges(server, customer)).length, 2);
      });

      test('15. too many form parameters and metadata over the limits get 400 without consuming the key', T, async () => {
        const server = await shared();
        const apiKey = `sk_test_${rand()}`;
        const key = `limits-${rand()}`;
        const customer = `cus_t15_${rand()}`;
        const form = 'application/x-www-form-urlencoded';
        const params101 = [`amount=500`, `currency=usd`, `customer=${customer}`, ...Array.from({ length: 98 }, (_, i) => `metadata[k${i}]=v`)].join('&');
        const tooMany = await postCharge(server, { apiKey, key, contentType: form, body: params101 });
        const p1 = assertProblem(tooMany, 400, 'urn:idem:example:payments:invalid-request', '101 form parameters:');
        assert.match(String(p1.detail), /Too many form parameters/);

        const keysOf = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v']));
        const invalid: Array<[string, Record<string, string>, string]> = [
          ['51 metadata keys', keysOf(51), 'metadata'],
          ['a 41-character metadata key', { ['k'.repeat(41)]: 'v' }, `metadata[${'k'.repeat(41)}]`],
          ['a 501-character metadata value', { note: 'v'.repeat(501) }, 'metadata[note]'],
        ];
        for (const [what, metadata, param] of invalid) {
          const res = await postCharge(server, { apiKey, key, body: { amount: 500, currency: 'usd', customer, metadata } });
          const problem = assertProblem(res, 400, 'urn:idem:example:payments:invalid-request', `${what}:`);
          assert.equal((problem.error as { param?: string }).param, param, what);
        }
        assert.equal((await pspCharges(server, customer)).length, 0, 'nothing ran');
        // At the limits exactly: 50 keys, a 40-character key, a 500-character value; same key.
        const metadata = { ...keysOf(48), ['k'.repeat(40)]: 'v', note: 'v'.repeat(500) };
        const ok = await postCharge(server, { apiKey, key, body: { amount: 500, currency: 'usd', customer, metadata } });
        const charge = assertFresh(ok, 'the key is still free after the 400s:');
        assert.deepEqual(charge.metadata, metadata);
        // The form parser accepts exactly 100 parameters (the 400 above is then about metadata, not the count).
        const params100 = params101.split('&').slice(0, 100).join('&');
        const hundred = assertProblem(
          await postCharge(server, { apiKey, key: `limits-100-${rand()}`, contentType: form, body: params100 }),
          400,
          'urn:idem:example:payments:invalid-request',
          '100 form parameters:',
        );
        assert.doesNotMatch(String(hundred.detail), /Too many form parameters/);
        assert.equal((await pspCharges(server, customer)).length, 1);
      });

      test(
        '16. a second server on the same PGlite directory exits 1 naming the first; the first keeps serving; a dead holder is taken over',
        { ...T, skip: backend.multiProcess ? 'PostgreSQL admits many servers on one database' : false },
        async () => {
          const db = backend.database();
          const dir = db.env.IDEM_DATA_DIR!;
          const a = await start(db);
          const second = await runUntilExit(db, {});
          assert.equal(second.code, 1, `the second server must exit 1:\n${second.output}`);
          assert.ok(
            second.output.includes(`idem example: cannot start: ${dir} is in use by process ${a.child.pid}: PGlite allows one process per data directory`),
            `the message names the directory and the holder:\n${second.output}`,
          );
          assert.doesNotMatch(second.output, /listening on/);
          assert.equal(a.child.exitCode, null, 'the first server is still running');
          const apiKey = `sk_test_${rand()}`;
          const key = `lock-${rand()}`;
          const body = { amount: 1600, currency: 'usd', customer: `cus_t16_${rand()}` };
          const created = await postCharge(a, { apiKey, key, body });
          assertFresh(created, 'the first server still serves:');

          // A holder that died without cleaning up (SIGKILL) leaves its pid file; it is taken over at once.
          a.child.kill('SIGKILL');
          await a.exited;
          assert.ok(existsSync(join(dir, 'idem-example.pid')), 'the killed server left its pid file');
          const b = await start(db);
          assertReplayOf(await postCharge(b, { apiKey, key, body }), created, 'the restarted server replays:');
          await b.stop();
          assert.ok(!existsSync(join(dir, 'idem-example.pid')), 'a clean stop removes the pid file');
        },
      );

      test('17. a server whose port is in use exits 1 with one line', T, async () => {
        const server = await shared();
        const db = backend.multiProcess ? sharedDb : backend.database();
        const result = await runUntilExit(db, { PORT: String(server.port) });
        assert.equal(result.code, 1, `must exit 1:\n${result.output}`);
        assert.match(result.output, new RegExp(`^idem example: cannot start: port ${server.port} on 127\\.0\\.0\\.1 is in use`, 'm'));
        assert.equal(result.output.trim().split('\n').length, 1, `one line:\n${result.output}`);
        if (!backend.multiProcess) assert.ok(!existsSync(join(db.env.IDEM_DATA_DIR!, 'idem-example.pid')), 'the failed start released its lock');
        assert.equal((await request(server.url, 'GET', '/healthz')).status, 200, 'the server on that port is unaffected');
      });

      /**
       * Crash scenarios: server A SIGKILLs itself at `point`; server B (same database, no crash
       * env) takes over once the lease has run out. On PostgreSQL B runs from the start (another
       * host); on PGlite B is a restart that reopens A's directory after A died.
       */
      async function crashScenario(point: 'after_charge_created' | 'psp_unrecorded' | 'after_psp' | 'in_finish') {
        const db = backend.database();
        const leaseMs = 1500;
        const env = { IDEM_LEASE_MS: String(leaseMs) };
        const [a, bEarly] = await Promise.all([
          start(db, { ...env, PAYMENTS_CRASH_AT: point }),
          backend.multiProcess ? start(db, env) : Promise.resolve(undefined),
        ]);
        const apiKey = `sk_test_${rand()}`;
        const key = `crash-${point}-${rand()}`;
        const customer = `cus_crash_${rand()}`;
        const body = { amount: 2500, currency: 'usd', customer, metadata: { point } };

        await assert.rejects(postCharge(a, { apiKey, key, body }), (error: NodeJS.ErrnoException) => {
          assert.ok(['ECONNRESET', 'EPIPE'].includes(error.code ?? ''), `expected a connection reset, got ${error.code} ${error.message}`);
          return true;
        });
        assert.deepEqual(await a.exited, { code: null, signal: 'SIGKILL' }, `the server killed itself at ${point}`);

        const before = await db.inspect({
          rows: localRows(customer),
          psp: { sql: `SELECT id, idempotency_key FROM psp_charges WHERE customer = $1`, params: [customer] },
          key: {
            sql: `SELECT state, recovery_point, phase_results ? 'psp_charged' AS psp_recorded, claim_id::text AS claim_id,
                GREATEST(0, EXTRACT(EPOCH FROM (locked_until - now())) * 1000)::float8 AS lease_left_ms
              FROM idempotency_keys WHERE key = $1`,
            params: [key],
          },
        });
        const inspectedAt = Date.now();
        assert.equal(before.rows.length, 1, 'phase 1 (charge_created) committed before the crash');
        assert.equal(before.rows[0]!.status, 'pending', 'the charge was not finished before the crash');
        assert.equal(before.key.length, 1);
        assert.equal(before.key[0]!.state, 'started', 'no response was stored before the crash');

        const b = bEarly ?? (await start(db, env));
        let first: { receivedAt: number; status: number } | undefined;
        const { res } = await retryUntilCreated(
          async () => {
            const res = await postCharge(b, { apiKey, key, body });
            first ??= { receivedAt: Date.now(), status: res.status };
            return res;
          },
          (res, attempt) => assertInProgress(res, `retry ${attempt} (until the crashed worker's lease runs out):`),
          60,
          20_000,
        );
        // The crashed worker's lease (1500 ms, renewed by its heartbeat) was still valid when the
        // key was inspected after the crash, by lease_left_ms on the database clock. A retry
        // answered before that lease ran out (200 ms margin for the inspect's return trip) was
        // claimed while it was valid, so it must have been refused with 409, not taken over.
        // Measured from the database rather than assumed, so a slow machine cannot fake a failure.
        const leaseLeftMs = Number(before.key[0]!.lease_left_ms);
        if (first!.receivedAt - inspectedAt < leaseLeftMs - 200) {
          assert.equal(first!.status, 409, `a retry answered within the crashed worker's lease (${leaseLeftMs} ms left) gets 409`);
        }
        const charge = assertFresh(res, 'the takeover:');
        assert.equal(charge.id, before.rows[0]!.id, 'the takeover reused the charge created before the crash');
        assert.deepEqual(charge.metadata, { point });
        assertReplayOf(await postCharge(b, { apiKey, key, body }), res);
        const psp = await pspCharges(b, customer);
        assert.deepEqual(
          psp.map((c) => c.id),
          [charge.psp_charge_id],
          'exactly one PSP charge',
        );

        await assertLocalCharge(b, apiKey, charge);
        if (backend.multiProcess) {
          const { rows } = await db.inspect({ rows: localRows(customer) });
          assert.deepEqual(rows.map((r) => [r.id, r.status, r.psp_charge_id]), [[charge.id, 'succeeded', charge.psp_charge_id]], 'exactly one local row');
        } // On PGlite the table was read before the retry (one row, this id); the schema allows one row per key.
        await b.stop();
        return { before, charge, apiKey, key };
      }

      test('7. crash after phase 1 (after_charge_created): the retry resumes with the same charge id; one row, one PSP charge', T, async () => {
        const { before } = await crashScenario('after_charge_created');
        assert.equal(before.psp.length, 0, 'the PSP was not called before the crash');
        assert.equal(before.key[0]!.recovery_point, 'charge_created');
      });

      test('7b. crash inside the PSP call after the PSP charged, before idem recorded it (psp_unrecorded): the derived key dedupes the repeated call; one PSP charge', T, async () => {
        const { before, charge, apiKey, key } = await crashScenario('psp_unrecorded');
        assert.equal(before.psp.length, 1, 'the PSP charge exists before the retry');
        assert.equal(before.key[0]!.recovery_point, 'charge_created', 'idem had not recorded the PSP call');
        assert.equal(before.key[0]!.psp_recorded, false, 'no psp_charged result was recorded');
        assert.equal(before.rows[0]!.psp_charge_id, null);
        // The retry called the PSP again with the same derived key, and got the same charge.
        const scope = 'tenant:' + createHash('sha256').update(apiKey).digest('base64url');
        const claimId = String(before.key[0]!.claim_id);
        assert.equal(before.psp[0]!.idempotency_key, deriveKey(scope, key, claimId, 'psp_charged'), 'the PSP saw the derived key');
        assert.equal(charge.psp_charge_id, before.psp[0]!.id, 'the retry got the charge made before the crash');
      });

      test('8. crash after the PSP call (after_psp): the retry reuses the PSP charge; still one PSP charge', T, async () => {
        const { before, charge } = await crashScenario('after_psp');
        assert.equal(before.psp.length, 1, 'the PSP charge exists before the retry');
        assert.equal(charge.psp_charge_id, before.psp[0]!.id);
      });

      test('9. crash inside the finish transaction (in_finish): nothing of it committed; the retry completes; one PSP charge', T, async () => {
        const { before, charge } = await crashScenario('in_finish');
        assert.equal(before.psp.length, 1);
        assert.equal(before.rows[0]!.psp_charge_id, null, 'the UPDATE in the finish transaction was rolled back');
        assert.equal(before.key[0]!.recovery_point, 'psp_charged');
        assert.equal(charge.psp_charge_id, before.psp[0]!.id);
      });

      test('10. PSP failures (rate 0.5): 20 keys retried until 201 → 20 PSP charges, 20 rows, stable replays', T, async () => {
        const db = backend.database();
        const server = await start(db, { PSP_FAILURE_RATE: '0.5', PSP_LATENCY_MS: '10' });
        const apiKey = `sk_test_${rand()}`;
        const tag = rand();
        const keys = Array.from({ length: 20 }, (_, i) => ({ key: `flaky-${tag}-${i}`, customer: `cus_t10_${tag}_${i}`, amount: 100 + i }));
        let failures = 0;
        const results = await Promise.all(
          keys.map(async ({ key, customer, amount }) => {
            const body = { amount, currency: 'usd', customer };
            const { res } = await retryUntilCreated(
              () => postCharge(server, { apiKey, key, body }),
              (r, attempt) => {
                assertProblem(r, 500, PROBLEM + 'request-failed-retry', `${key} attempt ${attempt}:`);
                failures++;
              },
              30,
              60_000,
            );
            const charge = assertCreated(res);
            assert.equal(charge.amount, amount);
            for (let i = 0; i < 2; i++) assertReplayOf(await postCharge(server, { apiKey, key, body }), res, `${key} replay ${i}:`);
            return { key, customer, charge };
          }),
        );
        assert.ok(failures > 0, 'the PSP failed at least once (else this test proves nothing)');
        const res = await request(server.url, 'GET', '/v1/psp/charges');
        const psp = (res.json() as { data: PspCharge[] }).data.filter((c) => c.customer.startsWith(`cus_t10_${tag}_`));
        assert.equal(psp.length, 20, `exactly 20 PSP charges after ${failures} failures`);
        for (const { customer, charge } of results) {
          assert.deepEqual(
            psp.filter((c) => c.customer === customer).map((c) => c.id),
            [charge.psp_charge_id],
          );
        }

        await server.stop();
        const { rows } = await db.inspect({
          rows: { sql: `SELECT id, customer, status, psp_charge_id FROM charges WHERE customer LIKE $1`, params: [`cus_t10_${tag}_%`] },
        });
        assert.equal(rows.length, 20, 'exactly 20 local rows');
        const byCustomer = new Map(rows.map((r) => [r.customer, r]));
        for (const { customer, charge } of results) {
          const row = byCustomer.get(customer);
          assert.equal(row?.id, charge.id);
          assert.equal(row?.status, 'succeeded');
          assert.equal(row?.psp_charge_id, charge.psp_charge_id);
        }
      });

      test('11. the official stripe SDK: create, explicit key replay, invalid request, automatic key across a reset connection', T, async () => {
        const server = await shared();
        const config = { host: '127.0.0.1', port: server.port, protocol: 'http' as const, maxNetworkRetries: 3 };
        const apiKey = `sk_test_${rand()}`;
        const stripe = new Stripe(apiKey, config);

        const customer = `cus_t11_${rand()}`;
        const created = await stripe.charges.create({ amount: 1500, currency: 'usd', customer, metadata: { order: '11' } });
        assert.match(created.id, /^ch_/);
        assert.equal(created.amount, 1500);
        assert.equal(created.status, 'succeeded');
        assert.equal(created.metadata.order, '11');
        assert.equal(created.lastResponse.statusCode, 201);
        assert.equal((await pspCharges(server, customer)).length, 1);

        const customer2 = `cus_t11b_${rand()}`;
        const idempotencyKey = `sdk-${rand()}`;
        const params = { amount: 1600, currency: 'usd', customer: customer2, metadata: { order: '12' } };
        const one = await stripe.charges.create(params, { idempotencyKey });
        const two = await stripe.charges.create({ metadata: { order: '12' }, customer: customer2, currency: 'usd', amount: 1600 }, { idempotencyKey });
        assert.equal(two.id, one.id);
        assert.equal(one.lastResponse.headers['idempotent-replayed'], undefined);
        assert.equal(two.lastResponse.headers['idempotent-replayed'], 'true');
        assert.equal((await pspCharges(server, customer2)).length, 1);

        await assert.rejects(stripe.charges.create({ amount: -5, currency: 'usd', customer: customer2 }), (error: unknown) => {
          assert.ok(error instanceof Stripe.errors.StripeInvalidRequestError, `got ${String(error)}`);
          assert.equal(error.statusCode, 400);
          assert.equal(error.param, 'amount');
          return true;
        });
        // A reused key: 422 (idem's default) with Stripe's `idempotency_error` member. stripe-node
        // maps idempotency_error to StripeIdempotencyError only for 400/404, so this surfaces as
        // a StripeAPIError; it must not be retried (the SDK retries only 409 and 5xx).
        await assert.rejects(stripe.charges.create({ ...params, amount: 1601 }, { idempotencyKey }), (error: unknown) => {
          assert.ok(error instanceof Stripe.errors.StripeError, `got ${String(error)}`);
          assert.equal(error.statusCode, 422);
          assert.equal(error.rawType, 'idempotency_error');
          assert.equal(error.code, 'idempotency_key_reused');
          return true;
        });

        // The server commits, the proxy swallows its response and resets the connection: the
        // SDK retries with the same automatic key and gets the replay.
        const proxy = await startResetProxy(server.port);
        try {
          const viaProxy = new Stripe(apiKey, { ...config, port: proxy.port });
          const customer3 = `cus_t11c_${rand()}`;
          const charge = await viaProxy.charges.create({ amount: 1700, currency: 'usd', customer: customer3, metadata: { order: '13' } });
          const lost = await proxy.swallowed;
          assert.equal(lost.status, 201, 'the server committed the first attempt');
          assert.equal((JSON.parse(lost.body.toString()) as ChargeBody).id, charge.id, 'the SDK got the charge the lost response carried');
          assert.equal(charge.lastResponse.headers['idempotent-replayed'], 'true', 'the SDK result is the replay');
          const posts = proxy.requests.filter((r) => r.requestLine.startsWith('POST /v1/charges '));
          assert.ok(posts.length >= 2, `the SDK retried (${posts.length} POSTs)`);
          assert.match(posts[0]!.idempotencyKey ?? '', /^stripe-node-retry-[0-9a-f-]{36}$/);
          assert.ok(
            posts.every((p) => p.idempotencyKey === posts[0]!.idempotencyKey),
            `every attempt carried one key: ${posts.map((p) => p.idempotencyKey).join(', ')}`,
          );
          const psp = await pspCharges(server, customer3);
          assert.deepEqual(
            psp.map((c) => c.id),
            [(charge as unknown as ChargeBody).psp_charge_id],
            'exactly one PSP charge for that intent',
          );
        } finally {
          await proxy.close();
        }
      });

      test(
        '12. a stale worker cannot write: A frozen after phase 1, B takes over, A resumes and is fenced (B finished / B still working)',
        { ...T, skip: backend.multiProcess ? false : 'PGlite admits one process per data directory: two servers cannot share it (PostgreSQL only)' },
        async () => {
          const db = backend.database();
          // A: slow PSP (1500 ms before its PSP call). B-fast finishes at once; B-slow is still
          // inside its own PSP call (2000 ms) when A wakes up, so only the fencing token (not
          // the key's state) can stop A there.
          const lease = { IDEM_LEASE_MS: '1000' };
          const [a, bFast, bSlow] = await Promise.all([
            start(db, { ...lease, PSP_LATENCY_MS: '3000' }),
            start(db, lease),
            start(db, { ...lease, PSP_LATENCY_MS: '2000' }),
          ]);
          const apiKey = `sk_test_${rand()}`;
          const one = async (statement: { sql: string; params?: unknown[] }) => (await db.inspect({ rows: statement })).rows;
          const keyRow = (key: string) =>
            one({ sql: `SELECT lock_version::int AS token, locked_until <= now() AS expired, state FROM idempotency_keys WHERE key = $1`, params: [key] });
          const scenario = (name: string, b: Server) => {
            const customer = `cus_t12_${name}_${rand()}`;
            return { name, b, key: `stale-${name}-${rand()}`, customer, body: { amount: 1200, currency: 'usd', customer } };
          };
          const finished = scenario('finished', bFast);
          const working = scenario('working', bSlow);
          const both = [finished, working];

          const aReplies = both.map((s) => settle(postCharge(a, { apiKey, key: s.key, body: s.body })));
          const phase1 = await Promise.all(
            both.map(async (s) => (await until(`A to commit phase 1 of ${s.name}`, () => one(localRows(s.customer)), (rows) => rows.length === 1, 10_000, 10))[0]!),
          );
          a.child.kill('SIGSTOP');
          try {
            for (const s of both) assert.equal((await pspCharges(bFast, s.customer)).length, 0, 'A was frozen before its PSP call');
            const aTokens = new Map<string, number>();
            for (const s of both) {
              const [row] = await until(`A's lease on ${s.name} to run out`, () => keyRow(s.key), (rows) => rows[0]?.expired === true, 10_000, 50);
              aTokens.set(s.name, Number(row!.token));
            }

            // B-fast takes over and finishes while A is frozen.
            const { res: finishedRes } = await retryUntilCreated(() => postCharge(bFast, { apiKey, key: finished.key, body: finished.body }), (r) => assertInProgress(r), 20, 10_000);
            const finishedCharge = assertFresh(finishedRes, 'B-fast took over:');
            assert.equal(finishedCharge.id, phase1[0]!.id, 'B-fast resumed after phase 1');
            const [finishedRow] = await keyRow(finished.key);
            assert.ok(Number(finishedRow!.token) > aTokens.get('finished')!, `B-fast's token ${finishedRow!.token} is above A's ${aTokens.get('finished')}`);

            // B-slow takes over and is inside its PSP call when A wakes up.
            const workingReply = settle(postCharge(bSlow, { apiKey, key: working.key, body: working.body }));
            const aToken = aTokens.get('working')!;
            const [taken] = await until('B-slow to take over', () => keyRow(working.key), (rows) => Number(rows[0]?.token) > aToken, 10_000, 10);
            assert.equal(taken!.state, 'started');
            assert.equal(taken!.expired, false, "B-slow holds a valid lease under a token above A's");

            a.child.kill('SIGCONT');
            const aResults = await Promise.race([Promise.all(aReplies), sleep(20_000).then(() => assert.fail("A's clients got no answer within 20 s"))]);
            for (const [i, result] of aResults.entries()) {
              const message = `A's client (${both[i]!.name}):`;
              if (result.ok) {
                const problem = assertProblem(result.value, 409, PROBLEM + 'idempotency-lease-lost', message);
                assert.equal((problem.error as { type?: string }).type, 'idempotency_error');
              } else {
                assert.ok(['ECONNRESET', 'EPIPE'].includes((result.error as NodeJS.ErrnoException).code ?? ''), `${message} ${String(result.error)}`);
              }
            }
            const working2 = await workingReply;
            assert.ok(working2.ok, `B-slow failed: ${String(!working2.ok && working2.error)}`);
            const workingCharge = assertFresh(working2.value, 'B-slow finished despite the stale worker:');
            assert.equal(workingCharge.id, phase1[1]!.id);
            assert.equal(a.child.exitCode, null, 'A is still running');

            for (const [s, res, charge] of [
              [finished, finishedRes, finishedCharge],
              [working, working2.value, workingCharge],
            ] as const) {
              assert.deepEqual(
                (await pspCharges(bFast, s.customer)).map((c) => c.id),
                [charge.psp_charge_id],
                `${s.name}: exactly one PSP charge (the late PSP call was deduplicated by the derived key)`,
              );
              const rows = await one(localRows(s.customer));
              assert.equal(rows.length, 1, `${s.name}: one local row`);
              assert.equal(rows[0]!.status, 'succeeded');
              assert.equal(rows[0]!.psp_charge_id, charge.psp_charge_id);
              const [stored] = await one({ sql: `SELECT state, response_status, response_body FROM idempotency_keys WHERE key = $1`, params: [s.key] });
              assert.equal(stored!.state, 'done');
              assert.equal(stored!.response_status, 201);
              assert.ok(Buffer.from(stored!.response_body as Uint8Array).equals(res.body), `${s.name}: the stored response is B's`);
              assertReplayOf(await postCharge(a, { apiKey, key: s.key, body: s.body }), res, `${s.name}: replay from A:`);
              assertReplayOf(await postCharge(s.b, { apiKey, key: s.key, body: s.body }), res, `${s.name}: replay from B:`);
            }
          } finally {
            a.child.kill('SIGCONT');
          }
        },
      );
    });
  }
});
