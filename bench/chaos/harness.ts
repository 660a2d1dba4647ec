/**
 * The fault-injection harness (issue 4). Runs N worker processes of the example payments API
 * (or of the naive baseline) on a fresh PostgreSQL database behind a round-robin front;
 * clients send many intents, some twice at once, each retried with the same key until a
 * final answer; meanwhile a fault injector
 *   - SIGKILLs random workers, and workers kill themselves at the named crash points
 *     (after the charge row, between the PSP charge and its record, after the PSP, inside
 *     the finish transaction) with probability PAYMENTS_CRASH_RATE;
 *   - cuts PostgreSQL connections, preferring ones inside a transaction (a TCP fault proxy);
 *   - SIGSTOPs workers for longer than their lease, so another attempt (or the completer)
 *     takes over while the old worker still runs, and SIGCONTs them: their late writes hit
 *     the fencing token;
 *   - makes the PSP fail (PSP_FAILURE_RATE), half of the failures after charging.
 * A supervisor restarts every worker that dies. At the end the invariants are checked from
 * the database and from what the clients received.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { migrate } from '../../examples/payments/app.js';
import { mysqlDatabase } from '../../examples/payments/mysql.js';
import type { Queryable } from '../../src/postgres/index.js';
import { runCompleterOnce } from '../../examples/payments/complete.js';
import type { CompleterReport } from '../../src/http/index.js';
import { startFaultProxy } from './fault-proxy.js';
import { startFront } from './front.js';
import { dropRedisPrefix, mysqlKeys, postgresKeys, redisKeys, type KeysView } from './keys-view.js';
import { PostgresPhases } from '../../src/redis/index.js';
import { sendWithRetries, type Attempted } from './retry-client.js';
import { recordSend, recordEffects, History, verdictViolations, type Verdict } from './history.js';
import { bundleEntry, children, FAILED_PERMANENTLY, percentile, problemType, ROOT, type Slot, sleep, waitFor } from './processes.js';

const SERVERS = {
  idem: join(ROOT, 'examples', 'payments', 'server.ts'),
  naive: join(ROOT, 'bench', 'chaos', 'naive-server.ts'),
};

export interface ChaosOptions {
  /**
   * PostgreSQL server to run on, or MySQL / MariaDB (a mysql:// URL: the workers then run the
   * example on `MySqlStore`, and the naive baseline on the same server); a fresh database is
   * created on it and dropped after.
   */
  databaseUrl: string;
  /** `idem`: the example payments API; `naive`: SELECT-then-INSERT, no lease, no fence. */
  mode: 'idem' | 'naive';
  /** Worker processes. */
  workers: number;
  /** User intents (each one idempotency key). */
  intents: number;
  /** Intents in flight at once. */
  concurrency: number;
  /** Fraction of intents sent twice at once (concurrent duplicates), 0-1. */
  duplicateRate: number;
  /** The workers' lease (IDEM_LEASE_MS), ms. */
  leaseMs: number;
  /** A random worker is SIGKILLed about this often, ms (0: never). */
  killEveryMs: number;
  /** Probability of a self-SIGKILL at each named crash point (PAYMENTS_CRASH_RATE). */
  crashRate: number;
  /** A random worker is SIGSTOPped for `pauseMs` about this often, ms (0: never). */
  pauseEveryMs: number;
  /** How long a paused worker stays stopped, ms; longer than the lease. */
  pauseMs: number;
  /** A PostgreSQL connection is cut about this often, ms (0: never). */
  cutEveryMs: number;
  /** PSP failure probability per call (PSP_FAILURE_RATE). */
  pspFailureRate: number;
  /** PSP latency per call, ms. */
  pspLatencyMs: number;
  /** Background completer period in the workers, ms (IDEM_COMPLETER_INTERVAL_MS). */
  completerIntervalMs: number;
  /** One attempt's timeout at the client, ms. */
  attemptTimeoutMs: number;
  /** A client gives up on an intent after this long, ms. */
  horizonMs: number;
  /** Where the workers keep idem's keys: PostgreSQL (default), or Redis at this URL (claims in Redis, phases in PostgreSQL). */
  redisUrl?: string;
  /** Progress lines. */
  log?: (line: string) => void;
  /** Every intent's final answer within this, ms (the history checker's liveness bound). @default horizonMs + attemptTimeoutMs */
  livenessBoundMs?: number;
}

/**
 * The long run's settings. The lease is short so takeovers happen often, but a few seconds:
 * on a busy shared machine event-loop and database lag alone can exceed a second, and a
 * lease shorter than that turns every request into a takeover race.
 */
export const DEFAULTS: Omit<ChaosOptions, 'databaseUrl' | 'mode'> = {
  workers: 3,
  intents: 1000,
  concurrency: 24,
  duplicateRate: 0.25,
  leaseMs: 4000,
  killEveryMs: 3000,
  crashRate: 0.01,
  pauseEveryMs: 8000,
  pauseMs: 5000,
  cutEveryMs: 800,
  pspFailureRate: 0.05,
  pspLatencyMs: 20,
  completerIntervalMs: 3000,
  attemptTimeoutMs: 8000,
  horizonMs: 300_000,
};

export interface ChaosResult {
  mode: 'idem' | 'naive';
  /** The server the run's database was on (the connections the proxy cut). */
  database: 'PostgreSQL' | 'MySQL';
  intents: number;
  /** HTTP attempts the clients made (all copies, all retries). */
  attempts: number;
  /** Intents sent twice at once. */
  duplicateSends: number;
  crashes: { total: number; random: number; named: number; byPoint: Record<string, number> };
  connectionsCut: { total: number; midTransaction: number };
  pauses: number;
  /** Takeovers (a retry or the completer took a key whose lease had expired). */
  takeovers: number;
  /** Writes of stale workers rejected by the fencing token (lease-lost events). */
  staleWritesFenced: number;
  /** 409 lease-lost answers the clients received. */
  leaseLost409: number;
  /** Intents with more than one PSP charge, and with more than one local charge row. */
  duplicates: { psp: number; local: number };
  /** Intents the clients got no final answer for within the horizon. */
  unanswered: number;
  /**
   * Intents whose final answer is the stored 500 `request-failed-permanently`: their key's
   * leases ran out unreleased `maxAttempts` times (protocol.md K23). In a chaos run that is the
   * faults (random and self-inflicted SIGKILLs, workers frozen past their lease) landing on one
   * key's attempts five times, which a busy machine makes likelier (each attempt takes longer);
   * a final answer, counted apart.
   */
  failedPermanently: number;
  /** Time from an intent's first attempt to its final response, ms. */
  p50Ms: number;
  p99Ms: number;
  /** Started keys seen overdue during the run (lease ended > bound ago), max of samples. */
  overdueStarted: number;
  /** The final completer passes (idem mode). */
  finalCompleter: CompleterReport[];
  durationMs: number;
  /** Every invariant that did not hold, one line each (empty: all held). */
  violations: string[];
  /** The history checker's verdict over every operation and effect (bench/chaos/history.ts). */
  history?: Verdict;
}

/** Runs one chaos run end to end. */
export async function runChaos(options: ChaosOptions): Promise<ChaosResult> {
  const o = options;
  const log = o.log ?? (() => undefined);
  const started = Date.now();
  const onMySql = /^(mysql|mariadb):/i.test(o.databaseUrl);
  if (onMySql && o.redisUrl) throw new Error('chaos: claims in Redis take their phases in PostgreSQL, not MySQL');
  const dbName = `idem_chaos_${randomBytes(5).toString('hex')}`;
  const admin = onMySql ? await mysqlAdmin(o.databaseUrl) : new pg.Pool({ connectionString: o.databaseUrl, max: 1 });
  await admin.query(`CREATE DATABASE ${dbName}`);
  const direct = new URL(o.databaseUrl);
  direct.pathname = '/' + dbName;
  // The harness's own connections (migrations, invariants): a Queryable on either server.
  const { pool, db, end: endPool } = onMySql ? mysqlPool(direct.toString()) : pgPool(direct.toString());
  // --store redis: claims under a fresh key prefix; the phase ledger created once up front.
  const redisPrefix = `idem-chaos-${randomBytes(4).toString('hex')}`;
  let keysView: KeysView = onMySql ? mysqlKeys(pool) : postgresKeys(pool as pg.Pool);
  const proxy = await startFaultProxy({
    host: direct.hostname || '127.0.0.1',
    port: Number(direct.port || (onMySql ? 3306 : 5432)),
    protocol: onMySql ? 'mysql' : 'postgres',
  });
  const viaProxy = new URL(direct.toString());
  viaProxy.hostname = '127.0.0.1';
  viaProxy.port = String(proxy.port);

  if (o.redisUrl && o.mode === 'idem') {
    await migrate(db);
    await new PostgresPhases({ client: pool as pg.Pool }).migrate();
    keysView = await redisKeys(o.redisUrl, redisPrefix);
  }
  const entry = await bundleEntry(SERVERS[o.mode], o.mode);
  const slots: Slot[] = Array.from({ length: o.workers }, (_, index) => ({ index, paused: false, killedByInjector: false, tail: [] }));
  const counts = { random: 0, named: 0, byPoint: {} as Record<string, number>, takeovers: 0, leaseLost: 0, cuts: 0, cutsMidTx: 0, pauses: 0 };
  let stopping = false;
  const front = await startFront(() => slots.filter((s) => s.port !== undefined).map((s) => s.port!));

  const workerEnv: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '',
    DATABASE_URL: viaProxy.toString(),
    PORT: '0',
    HOST: '127.0.0.1',
    PG_POOL_MAX: '6',
    PSP_LATENCY_MS: String(o.pspLatencyMs),
    PSP_FAILURE_RATE: String(o.pspFailureRate),
    PAYMENTS_CRASH_RATE: String(o.crashRate),
    IDEM_LEASE_MS: String(o.leaseMs),
    IDEM_RETENTION_MS: String(3_600_000),
    IDEM_COMPLETER_INTERVAL_MS: String(o.completerIntervalMs),
    IDEM_COMPLETER_GRACE_MS: '0',
    IDEM_EVENT_LOG: '1',
    IDEM_MIGRATE: '0',
    ...(o.redisUrl ? { REDIS_URL: o.redisUrl, IDEM_REDIS_PREFIX: redisPrefix } : {}),
  };

  const spawnWorker = (slot: Slot) => {
    slot.port = undefined;
    slot.paused = false;
    slot.killedByInjector = false;
    const child = spawn(process.execPath, [entry], { cwd: ROOT, env: workerEnv, stdio: ['ignore', 'pipe', 'pipe'] });
    slot.child = child;
    children.add(child);
    let buffer = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        const listening = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(line);
        if (listening && slot.child === child) slot.port = Number(listening[1]);
        else if (line.startsWith('idem-event ')) {
          const type = (JSON.parse(line.slice(11)) as { type: string }).type;
          if (type === 'taken-over') counts.takeovers++;
          else if (type === 'lease-lost') counts.leaseLost++;
        } else if (line.startsWith('payments-crash ')) {
          const point = line.slice(15).trim();
          counts.byPoint[point] = (counts.byPoint[point] ?? 0) + 1;
          counts.named++;
        }
      }
    });
    child.stderr!.on('data', (chunk: Buffer) => {
      slot.tail.push(chunk.toString());
      if (slot.tail.length > 20) slot.tail.shift();
    });
    child.on('exit', (code, signal) => {
      children.delete(child);
      if (slot.child !== child) return;
      slot.port = undefined;
      slot.child = undefined;
      if (stopping) return;
      if (signal === 'SIGKILL' && slot.killedByInjector) counts.random++;
      else if (signal !== 'SIGKILL') log(`worker ${slot.index} exited (${code ?? signal}): ${slot.tail.join('').trim().split('\n').slice(-12).join(' | ')}`);
      setTimeout(() => !stopping && spawnWorker(slot), 50);
    });
  };

  try {
    await migrate(db);
    await pool.query(
      onMySql
        ? 'CREATE TABLE IF NOT EXISTS naive_keys (scope VARCHAR(255) NOT NULL, `key` VARCHAR(255) NOT NULL, status INT NOT NULL, body LONGBLOB NOT NULL, PRIMARY KEY (scope, `key`))'
        : `CREATE TABLE IF NOT EXISTS naive_keys (
      scope text NOT NULL, key text NOT NULL, status int NOT NULL, body bytea NOT NULL, PRIMARY KEY (scope, key))`,
    );
    for (const slot of slots) spawnWorker(slot);
    // Each worker's readiness is its "listening" line (s.port); the ceiling is generous because
    // tsx workers starting together on a busy two-core machine can take a minute or more.
    await waitFor(
      () => slots.every((s) => s.port !== undefined),
      180_000,
      () => `workers did not start:\n${slots.map((s) => s.tail.join('')).join('\n')}`,
    );
    log(`${o.mode}: ${o.workers} workers up in ${Date.now() - started} ms; sending ${o.intents} intents`);

    // Fault injector.
    const live = () => slots.filter((s) => s.port !== undefined && s.child && !s.paused);
    const pick = <T>(xs: T[]): T | undefined => xs[Math.floor(Math.random() * xs.length)];
    const timers: Array<ReturnType<typeof setTimeout>> = [];
    const every = (ms: number, fn: () => void) => {
      if (!(ms > 0)) return;
      const tick = () => {
        if (stopping) return;
        fn();
        timers.push(setTimeout(tick, ms * (0.5 + Math.random())));
      };
      timers.push(setTimeout(tick, ms * Math.random()));
    };
    let injecting = true;
    every(o.killEveryMs, () => {
      // Never the last live worker: the point is crashes under load, not an outage.
      const slot = injecting && live().length > 1 ? pick(live()) : undefined;
      if (!slot) return;
      slot.killedByInjector = true;
      slot.child!.kill('SIGKILL');
    });
    every(o.pauseEveryMs, () => {
      const slot = injecting && live().length > 1 ? pick(live()) : undefined;
      if (!slot) return;
      const child = slot.child!;
      slot.paused = true;
      counts.pauses++;
      child.kill('SIGSTOP');
      timers.push(
        setTimeout(() => {
          if (slot.child === child) {
            child.kill('SIGCONT');
            slot.paused = false;
          }
        }, o.pauseMs),
      );
    });
    every(o.cutEveryMs, () => {
      if (!injecting) return;
      const cut = proxy.cut();
      if (cut === 'none') return;
      counts.cuts++;
      if (cut === 'mid-transaction') counts.cutsMidTx++;
    });
    // "No key stays started past lease + completer interval": sampled while faults run. A
    // key's lease ends at locked_until; the next completer pass (every interval, in every
    // live worker) takes it; the bound allows two intervals plus scheduling slack.
    let overdueStarted = 0;
    const boundMs = o.leaseMs + 2 * o.completerIntervalMs + 5000;
    if (o.mode === 'idem') {
      every(1000, () => {
        keysView.overdueStarted(boundMs - o.leaseMs).then(
          (n) => (overdueStarted = Math.max(overdueStarted, n)),
          () => undefined,
        );
      });
    }

    // Clients.
    const url = `http://127.0.0.1:${front.port}/v1/charges`;
    interface Intent {
      id: string;
      customer: string;
      sends: Attempted[];
      replay?: Attempted;
    }
    const intents: Intent[] = [];
    const history = new History({
      harness: `http-${o.mode}`,
      ledgers: ['psp', 'local'],
      livenessBoundMs: o.livenessBoundMs ?? o.horizonMs + o.attemptTimeoutMs,
    });
    let attempts = 0;
    let duplicateSends = 0;
    let nextIntent = 0;
    let done = 0;
    const client = async () => {
      for (let i = nextIntent++; i < o.intents; i = nextIntent++) {
        const id = randomUUID();
        const customer = `cus_${id}`;
        const headers = {
          authorization: `Bearer sk_chaos_${i % 4}`,
          'idempotency-key': `chaos-${id}`,
          'content-type': 'application/json',
        };
        const body = new TextEncoder().encode(JSON.stringify({ amount: 100 + i, currency: 'usd', customer }));
        const copies = Math.random() < o.duplicateRate ? 2 : 1;
        if (copies === 2) duplicateSends++;
        const send = (bytes = body, mismatch = false) =>
          recordSend(history, { key: headers['idempotency-key'], scope: headers.authorization, expectId: customer, body: bytes, mismatch }, () =>
            sendWithRetries({ url, headers, body: bytes, attemptTimeoutMs: o.attemptTimeoutMs, horizonMs: o.horizonMs }),
          );
        const intent: Intent = { id, customer, sends: await Promise.all(Array.from({ length: copies }, () => send())) };
        // One more retry after the final answer: a replay must equal the original.
        if (intent.sends.every((s) => s.final)) intent.replay = await send();
        // Some finished keys get the same key with another body: a 422, never the stored body (history.ts).
        if (intent.sends[0]?.final?.status === 201 && Math.random() < 0.1)
          await send(new TextEncoder().encode(JSON.stringify({ amount: 1 + i, currency: 'usd', customer })), true);
        intents.push(intent);
        attempts += intent.sends.reduce((n, s) => n + s.attempts, 0);
        if (++done % Math.max(1, Math.floor(o.intents / 10)) === 0) log(`${o.mode}: ${done}/${o.intents} intents answered`);
      }
    };
    await Promise.all(Array.from({ length: o.concurrency }, client));

    // Faults stop; paused workers resume (their stale writes are fenced now, if not before).
    injecting = false;
    for (const slot of slots) if (slot.paused && slot.child) slot.child.kill('SIGCONT');
    await sleep(Math.min(2000, o.leaseMs));
    stopping = true;
    for (const t of timers) clearTimeout(t);
    await Promise.all(
      slots.map(async (slot) => {
        const child = slot.child;
        if (!child) return;
        child.kill('SIGCONT');
        child.kill('SIGTERM');
        await new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.on('exit', () => resolve());
          setTimeout(() => {
            child.kill('SIGKILL');
            resolve();
          }, 5000);
        });
      }),
    );

    // Final completer passes (idem): every lease has ended by now.
    const finalCompleter: CompleterReport[] = [];
    if (o.mode === 'idem') {
      await sleep(o.leaseMs + 200);
      for (let pass = 0; pass < 5; pass++) {
        const report = await runCompleterOnce({
          DATABASE_URL: direct.toString(),
          IDEM_LEASE_MS: String(o.leaseMs),
          IDEM_RETENTION_MS: '3600000',
          PSP_LATENCY_MS: '0',
          PSP_FAILURE_RATE: '0',
          ...(o.redisUrl ? { REDIS_URL: o.redisUrl, IDEM_REDIS_PREFIX: redisPrefix } : {}),
        });
        finalCompleter.push(report);
        if (report.found === 0) break;
      }
    }

    // Invariants.
    const violations: string[] = [];
    const byCustomer = async (table: string) =>
      new Map((await pool.query(`SELECT customer, count(*) AS n FROM ${table} GROUP BY customer`)).rows.map((r) => [String(r.customer), Number(r.n)]));
    const psp = await byCustomer('psp_charges');
    const local = await byCustomer('charges');
    const duplicates = { psp: 0, local: 0 };
    const lostCharges: string[] = [];
    let unanswered = 0;
    let failedPermanently = 0;
    const elapsed: number[] = [];
    const keys = o.mode === 'idem' ? await keysView.all() : new Map<string, Record<string, unknown>>();
    let differing = 0;
    let lostRows = 0;
    const unansweredSamples: string[] = [];
    for (const intent of intents) {
      const p = psp.get(intent.customer) ?? 0;
      const l = local.get(intent.customer) ?? 0;
      if (p > 1) duplicates.psp++;
      if (l > 1) duplicates.local++;
      const finals = [...intent.sends, ...(intent.replay ? [intent.replay] : [])].map((s) => s.final);
      const first = finals.find((f) => f);
      // A key ended by K23 may have stopped before its charge row or before the PSP call (the
      // example commits the row first, then calls): never a PSP charge without the row.
      const endedByK23 = first !== undefined && first.status === 500 && problemType(first.body) === FAILED_PERMANENTLY;
      if (endedByK23) failedPermanently++;
      if (endedByK23 ? p > 0 && l === 0 : p === 0 || l === 0) lostCharges.push(intent.id);
      if (intent.sends.some((s) => !s.final)) {
        unanswered++;
        // Why: each copy's last attempts, and where the key ended (after the final completer).
        if (unansweredSamples.length < 3) {
          const row = keys.get(`chaos-${intent.id}`);
          const copies = intent.sends.map(
            (s, i) =>
              `copy ${i + 1}: ${s.final ? `final ${s.final.status}` : `${s.attempts} attempts, last ${s.history.join(' ')}${s.lastErrorBody ? ` (last 5xx: ${s.lastErrorBody})` : ''}`}`,
          );
          unansweredSamples.push(
            `  chaos-${intent.id} (key ${o.mode === 'naive' ? 'n/a' : row ? row.state : 'absent'}; PSP charges ${p}, local ${l}): ${copies.join('; ')}`,
          );
        }
      } else elapsed.push(intent.sends[0]!.elapsedMs);
      if (first && finals.some((f) => f && (f.status !== first.status || !Buffer.from(f.body).equals(Buffer.from(first.body))))) differing++;
      if (o.mode === 'idem' && first) {
        const row = keys.get(`chaos-${intent.id}`);
        if (row?.state !== 'done' || !Buffer.from(row.response_body as Uint8Array).equals(Buffer.from(first.body))) lostRows++;
      }
    }
    for (const intent of intents) {
      const key = `chaos-${intent.id}`;
      recordEffects(history, key, { psp: psp.get(intent.customer) ?? 0, local: local.get(intent.customer) ?? 0 });
      const row = keys.get(key);
      if (row?.state === 'done' && row.response_body) history.stored(key, row.response_body as Uint8Array);
    }
    const verdict = history.finish(log);
    violations.push(...verdictViolations(verdict));
    if (duplicates.psp > 0) violations.push(`${duplicates.psp} intents charged more than once at the PSP`);
    if (duplicates.local > 0) violations.push(`${duplicates.local} intents with more than one local charge row`);
    if (lostCharges.length > 0) violations.push(`${lostCharges.length} intents with no charge (PSP or local), e.g. ${lostCharges[0]}`);
    if (differing > 0) violations.push(`${differing} intents whose responses (copies, retries, replay) were not byte-identical`);
    if (unanswered > 0) violations.push(`${unanswered} intents got no final answer within ${o.horizonMs} ms:\n${unansweredSamples.join('\n')}`);
    if (o.mode === 'idem') {
      if (lostRows > 0) violations.push(`${lostRows} answered intents whose finished row is missing or differs from what the client got`);
      const left = await keysView.started();
      if (left > 0) violations.push(`${left} keys still started after the final completer pass`);
      if (overdueStarted > 0) violations.push(`up to ${overdueStarted} keys stayed started past lease + 2 completer intervals + 5 s during the run`);
    }
    elapsed.sort((a, b) => a - b);
    const result: ChaosResult = {
      mode: o.mode,
      database: onMySql ? 'MySQL' : 'PostgreSQL',
      intents: intents.length,
      attempts,
      duplicateSends,
      crashes: { total: counts.random + counts.named, random: counts.random, named: counts.named, byPoint: counts.byPoint },
      connectionsCut: { total: counts.cuts, midTransaction: counts.cutsMidTx },
      pauses: counts.pauses,
      takeovers: counts.takeovers,
      staleWritesFenced: counts.leaseLost,
      leaseLost409: intents.reduce((n, i) => n + i.sends.reduce((m, s) => m + s.leaseLost409, 0), 0),
      duplicates,
      unanswered,
      failedPermanently,
      p50Ms: percentile(elapsed, 0.5),
      p99Ms: percentile(elapsed, 0.99),
      overdueStarted,
      finalCompleter,
      durationMs: Date.now() - started,
      violations,
      history: verdict,
    };
    return result;
  } finally {
    stopping = true;
    for (const slot of slots) {
      slot.child?.kill('SIGCONT');
      slot.child?.kill('SIGKILL');
    }
    await front.close().catch(() => undefined);
    await proxy.close().catch(() => undefined);
    await endPool().catch(() => undefined);
    if (o.redisUrl) await dropRedisPrefix(o.redisUrl, redisPrefix).catch(() => undefined);
    await keysView.close().catch(() => undefined);
    await admin.query(`DROP DATABASE IF EXISTS ${dbName}${onMySql ? '' : ' WITH (FORCE)'}`).catch(() => undefined);
    rmSync(entry, { force: true });
    await admin.end().catch(() => undefined);
  }
}

/** The harness's pool on PostgreSQL. */
function pgPool(url: string): OwnPool {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => undefined);
  return { pool, db: pool, end: () => pool.end() };
}

/** The harness's connections: `pool` for its own queries, `db` as the example takes it (migrate). */
interface OwnPool {
  pool: Queryable;
  db: Parameters<typeof migrate>[0];
  end(): Promise<void>;
}

/** The harness's pool on MySQL, as the example's Queryable (`$n` placeholders). */
function mysqlPool(url: string): OwnPool {
  const raw = mysql.createPool({ uri: url, connectionLimit: 4 });
  const db = mysqlDatabase(raw);
  return { pool: db, db, end: () => raw.end() };
}

/** One connection to the MySQL server (CREATE / DROP DATABASE), with `end()` as pg.Pool's. */
async function mysqlAdmin(url: string): Promise<{ query(sql: string): Promise<unknown>; end(): Promise<void> }> {
  const conn = await mysql.createConnection(url);
  conn.on('error', () => undefined);
  return { query: (sql) => conn.query(sql), end: () => conn.end() };
}
