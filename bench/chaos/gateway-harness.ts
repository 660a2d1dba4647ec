/**
 * The gateway's crash drill (issue 41) through the chaos harness's pieces: 2 `idem gateway`
 * processes (the CLI, bundled once so a restart is fast) on a fresh PostgreSQL database reached
 * through the TCP fault proxy, in front of the Python upstream (test/gateway/upstream.py: its
 * own sqlite3 ledger of effects, its writes fenced on `Idem-Fencing-Token`), behind the
 * round-robin front. Clients send intents with keys through either gateway (some twice at
 * once), each retried with the same key until a final answer, then once more (a replay);
 * meanwhile a fault injector
 *   - SIGKILLs a random gateway (never the last live one) and the supervisor restarts it;
 *   - SIGSTOPs a gateway for longer than its lease, so the key's retry through the other
 *     gateway takes it over with a higher token while the frozen one still holds its attempt,
 *     and SIGCONTs it: its late store writes meet the store's fence, its late upstream attempts
 *     the upstream's;
 *   - cuts the gateways' PostgreSQL connections, preferring ones inside a transaction.
 * Counted from the upstream's ledger and from what the clients received: double effects (more
 * than one effect row for a key), lost intents (a 2xx final answer whose effect is not in the
 * ledger, or is another effect than the one answered; or no final answer within the horizon),
 * and replays (every copy, retry and the replay byte-identical).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { startFaultProxy } from './fault-proxy.js';
import { startFront } from './front.js';
import { sendWithRetries, type Attempted } from './retry-client.js';
import { bundleEntry, children, FAILED_PERMANENTLY, parseJson, percentile, problemType, ROOT, type Slot, sleep, waitFor } from './processes.js';

export interface GatewayChaosOptions {
  /** PostgreSQL server; a fresh database is created on it and dropped after. */
  databaseUrl: string;
  /** Gateway processes. */
  gateways: number;
  intents: number;
  /** Intents in flight at once. */
  concurrency: number;
  /** Fraction of intents sent twice at once, 0-1. */
  duplicateRate: number;
  /** The gateways' lease (`leaseMs`), ms. */
  leaseMs: number;
  /** The upstream's work per request (X-Delay-Ms), up to this many ms, random per intent. */
  upstreamDelayMs: number;
  /**
   * Fraction of intents whose upstream work is longer than the lease (`slowMs`): the gateway's
   * heartbeat holds the key while it works, and a kill or freeze of that gateway meanwhile lets a
   * takeover reach the upstream while the first attempt still runs there, whose late write the
   * upstream's fence then refuses.
   */
  slowRate: number;
  /**
   * The slow intents' upstream work, ms: a few leases long, so a takeover after a kill early in
   * it arrives while the first attempt still works (the client's attempt timeout grows by as much).
   */
  slowMs: number;
  /** A random gateway is SIGKILLed about this often, ms (0: never). */
  killEveryMs: number;
  /** A random gateway is SIGSTOPped for `pauseMs` about this often, ms (0: never). */
  pauseEveryMs: number;
  /** How long a frozen gateway stays stopped, ms; longer than the lease. */
  pauseMs: number;
  /** A store connection is cut about this often, ms (0: never). */
  cutEveryMs: number;
  /** One attempt's timeout at the client, ms. */
  attemptTimeoutMs: number;
  /** A client gives up on an intent after this long, ms. */
  horizonMs: number;
  log?: (line: string) => void;
}

export const GATEWAY_DEFAULTS: Omit<GatewayChaosOptions, 'databaseUrl'> = {
  gateways: 2,
  intents: 600,
  concurrency: 16,
  duplicateRate: 0.25,
  leaseMs: 3000,
  upstreamDelayMs: 60,
  slowRate: 0.05,
  slowMs: 9000,
  killEveryMs: 2000,
  pauseEveryMs: 8000,
  pauseMs: 4500,
  cutEveryMs: 600,
  attemptTimeoutMs: 6000,
  horizonMs: 300_000,
};

export interface GatewayChaosResult {
  mode: 'gateway';
  intents: number;
  duplicateSends: number;
  /** HTTP attempts the clients made (all copies, all retries, not the replays). */
  attempts: number;
  /** Gateways SIGKILLed by the injector (each restarted). */
  kills: number;
  /** Gateways frozen past their lease (SIGSTOP, then SIGCONT). */
  freezes: number;
  connectionsCut: { total: number; midTransaction: number };
  /** Requests the upstream received for the intents' keys (every gateway attempt). */
  upstreamAttempts: number;
  /** Keys the upstream saw with more than one fencing token: taken over by a later attempt. */
  takenOver: number;
  /** Upstream requests whose token is below the token of the key's effect: refused by the upstream's fence (on arrival or at the write). */
  staleFenced: number;
  /** Keys with more than one effect row in the upstream's ledger. */
  doubleEffects: number;
  /** Intents answered 2xx whose answered effect is not the one in the ledger (or there is none). */
  lost: number;
  /** Intents with no final answer within the horizon. */
  unanswered: number;
  /** Intents whose copies, retries and replay were not byte-identical. */
  differing: number;
  /** Intents answered 500 `request-failed-permanently` (protocol.md K23), counted apart. */
  failedPermanently: number;
  p50Ms: number;
  p99Ms: number;
  durationMs: number;
  violations: string[];
}

interface Upstream {
  url: string;
  state(): Promise<{ effects: Array<{ id: number; scope: string; key: string; token: number }>; seen: Array<{ headers: Record<string, string> }> }>;
  stop(): void;
}

/** Starts test/gateway/upstream.py on a fresh sqlite database; resolves once it listens. */
async function startUpstream(dir: string): Promise<Upstream> {
  const child = spawn('python3', [join(ROOT, 'test', 'gateway', 'upstream.py'), join(dir, 'effects.db')], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  let output = '';
  const port = await new Promise<number>((resolve, reject) => {
    const onData = (d: Buffer) => {
      output += d.toString();
      const match = /listening (\d+)/.exec(output);
      if (match) resolve(Number(match[1]));
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`upstream.py exited ${code}:\n${output}`)));
  });
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    state: async () => (await (await fetch(`${url}/control/effects`)).json()) as Awaited<ReturnType<Upstream['state']>>,
    stop: () => {
      child.kill('SIGKILL');
      children.delete(child);
    },
  };
}

/** Runs the drill end to end. */
export async function runGatewayChaos(o: GatewayChaosOptions): Promise<GatewayChaosResult> {
  const log = o.log ?? (() => undefined);
  const started = Date.now();
  const dbName = `idem_gwchaos_${randomBytes(5).toString('hex')}`;
  const admin = new pg.Pool({ connectionString: o.databaseUrl, max: 1 });
  await admin.query(`CREATE DATABASE ${dbName}`);
  const direct = new URL(o.databaseUrl);
  direct.pathname = '/' + dbName;
  const proxy = await startFaultProxy({ host: direct.hostname || '127.0.0.1', port: Number(direct.port || 5432) });
  const viaProxy = new URL(direct.toString());
  viaProxy.hostname = '127.0.0.1';
  viaProxy.port = String(proxy.port);
  const dir = mkdtempSync(join(tmpdir(), 'idem-gwchaos-'));
  const upstream = await startUpstream(dir);
  const config = join(dir, 'gateway.json');
  writeFileSync(
    config,
    JSON.stringify({
      upstream: upstream.url,
      listen: '127.0.0.1:0',
      principal: { hash: 'authorization' },
      leaseMs: o.leaseMs,
      routes: [{ path: '/v1/*', methods: ['POST'] }],
    }),
  );
  const entry = await bundleEntry(join(ROOT, 'src', 'cli', 'main.ts'), 'gateway-cli');
  const slots: Slot[] = Array.from({ length: o.gateways }, (_, index) => ({ index, paused: false, killedByInjector: false, tail: [] }));
  const counts = { kills: 0, freezes: 0, cuts: 0, cutsMidTx: 0 };
  let stopping = false;
  const front = await startFront(() => slots.filter((s) => s.port !== undefined).map((s) => s.port!));
  const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' };
  const args = [entry, 'gateway', '--config', config, '--store', viaProxy.toString()];
  // The first gateway creates the key table; the others (and every restart) find it there.
  const spawnGateway = (slot: Slot) => {
    slot.port = undefined;
    slot.paused = false;
    slot.killedByInjector = false;
    const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    slot.child = child;
    children.add(child);
    let buffer = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      const listening = /idem gateway listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(buffer);
      if (listening && slot.child === child && slot.port === undefined) slot.port = Number(listening[1]);
      if (buffer.length > 4096) buffer = buffer.slice(-1024);
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
      if (signal === 'SIGKILL' && slot.killedByInjector) counts.kills++;
      else log(`gateway ${slot.index} exited (${code ?? signal}): ${slot.tail.join('').trim().split('\n').slice(-6).join(' | ')}`);
      setTimeout(() => !stopping && spawnGateway(slot), 50);
    });
  };

  try {
    spawnGateway(slots[0]!);
    await waitFor(
      () => slots[0]!.port !== undefined,
      180_000,
      () => `gateway did not start:\n${slots[0]!.tail.join('')}`,
    );
    for (const slot of slots.slice(1)) spawnGateway(slot);
    await waitFor(
      () => slots.every((s) => s.port !== undefined),
      180_000,
      () => `gateways did not start:\n${slots.map((s) => s.tail.join('')).join('\n')}`,
    );
    log(`gateway: ${o.gateways} gateways up in ${Date.now() - started} ms; sending ${o.intents} intents`);

    const live = () => slots.filter((s) => s.port !== undefined && s.child && !s.paused);
    const pick = <T>(xs: T[]): T | undefined => xs[Math.floor(Math.random() * xs.length)];
    const timers: Array<ReturnType<typeof setTimeout>> = [];
    // `fn` returns false when it found no gateway to hit (one is restarting or frozen): then it
    // tries again shortly instead of a whole period later, so a short run meets every fault.
    const every = (ms: number, fn: () => boolean) => {
      if (!(ms > 0)) return;
      const tick = () => {
        if (stopping) return;
        const hit = fn();
        timers.push(setTimeout(tick, hit ? ms * (0.5 + Math.random()) : 200));
      };
      timers.push(setTimeout(tick, ms * Math.random()));
    };
    let injecting = true;
    // Never the last live gateway: crashes under load, not an outage.
    every(o.killEveryMs, () => {
      const slot = injecting && live().length > 1 ? pick(live()) : undefined;
      if (!slot) return false;
      slot.killedByInjector = true;
      slot.child!.kill('SIGKILL');
      return true;
    });
    every(o.pauseEveryMs, () => {
      const slot = injecting && live().length > 1 ? pick(live()) : undefined;
      if (!slot) return false;
      const child = slot.child!;
      slot.paused = true;
      counts.freezes++;
      child.kill('SIGSTOP');
      timers.push(
        setTimeout(() => {
          if (slot.child === child) {
            child.kill('SIGCONT');
            slot.paused = false;
          }
        }, o.pauseMs),
      );
      return true;
    });
    every(o.cutEveryMs, () => {
      if (!injecting) return true;
      const cut = proxy.cut();
      if (cut === 'none') return false;
      counts.cuts++;
      if (cut === 'mid-transaction') counts.cutsMidTx++;
      return true;
    });

    const url = `http://127.0.0.1:${front.port}/v1/charges`;
    interface Intent {
      key: string;
      sends: Attempted[];
      replay?: Attempted;
    }
    const intents: Intent[] = [];
    let attempts = 0;
    let duplicateSends = 0;
    let nextIntent = 0;
    const client = async () => {
      for (let i = nextIntent++; i < o.intents; i = nextIntent++) {
        const key = `gwchaos-${randomUUID()}`;
        const slow = Math.random() < o.slowRate;
        const headers = {
          authorization: `Bearer sk_chaos_${i % 4}`,
          'idempotency-key': key,
          'content-type': 'application/json',
          'x-delay-ms': String(slow ? o.slowMs : Math.floor(Math.random() * o.upstreamDelayMs)),
        };
        const body = new TextEncoder().encode(JSON.stringify({ amount: 100 + i, currency: 'usd' }));
        const copies = Math.random() < o.duplicateRate ? 2 : 1;
        if (copies === 2) duplicateSends++;
        const attemptTimeoutMs = o.attemptTimeoutMs + (slow ? o.slowMs : 0);
        const send = () => sendWithRetries({ url, headers, body, attemptTimeoutMs, horizonMs: o.horizonMs });
        const intent: Intent = { key, sends: await Promise.all(Array.from({ length: copies }, send)) };
        if (intent.sends.every((s) => s.final)) intent.replay = await send();
        intents.push(intent);
        attempts += intent.sends.reduce((n, s) => n + s.attempts, 0);
        if (intents.length % Math.max(1, Math.floor(o.intents / 10)) === 0) log(`gateway: ${intents.length}/${o.intents} intents answered`);
      }
    };
    await Promise.all(Array.from({ length: o.concurrency }, client));

    // Faults stop; a frozen gateway wakes, its late attempts meet the fences; then the ledger is read.
    injecting = false;
    for (const slot of slots) if (slot.paused && slot.child) slot.child.kill('SIGCONT');
    await sleep(Math.min(2000, o.leaseMs));
    stopping = true;
    for (const t of timers) clearTimeout(t);
    for (const slot of slots) slot.child?.kill('SIGKILL');
    const { effects, seen } = await upstream.state();

    const effectsByKey = new Map<string, Array<{ id: number; token: number }>>();
    for (const e of effects) effectsByKey.set(e.key, [...(effectsByKey.get(e.key) ?? []), e]);
    const tokensByKey = new Map<string, number[]>();
    for (const s of seen) {
      const key = s.headers['idempotency-key'];
      if (key) tokensByKey.set(key, [...(tokensByKey.get(key) ?? []), Number(s.headers['idem-fencing-token'] ?? 0)]);
    }
    let upstreamAttempts = 0;
    let takenOver = 0;
    let staleFenced = 0;
    for (const [key, tokens] of tokensByKey) {
      upstreamAttempts += tokens.length;
      if (new Set(tokens).size > 1) takenOver++;
      const applied = effectsByKey.get(key)?.[0]?.token;
      if (applied !== undefined) staleFenced += tokens.filter((t) => t < applied).length;
    }
    let doubleEffects = 0;
    let unanswered = 0;
    let differing = 0;
    let failedPermanently = 0;
    const lost: string[] = [];
    const elapsed: number[] = [];
    const samples: string[] = [];
    for (const intent of intents) {
      const rows = effectsByKey.get(intent.key) ?? [];
      if (rows.length > 1) doubleEffects++;
      const finals = [...intent.sends, ...(intent.replay ? [intent.replay] : [])].map((s) => s.final);
      const first = finals.find((f) => f);
      if (intent.sends.some((s) => !s.final)) {
        unanswered++;
        if (samples.length < 3)
          samples.push(`  ${intent.key}: ${intent.sends.map((s) => (s.final ? `final ${s.final.status}` : s.history.join(' '))).join('; ')}`);
      } else elapsed.push(Math.max(...intent.sends.map((s) => s.elapsedMs)));
      if (first && finals.some((f) => f && (f.status !== first.status || !Buffer.from(f.body).equals(Buffer.from(first.body))))) differing++;
      if (!first) continue;
      if (first.status === 500 && problemType(first.body) === FAILED_PERMANENTLY) {
        failedPermanently++;
        continue;
      }
      // A 2xx is an acknowledged effect: the one it names must be the key's effect in the ledger.
      if (first.status >= 200 && first.status < 300) {
        const answered = parseJson(first.body) as { id?: string; key?: string } | undefined;
        if (rows.length === 0 || answered?.key !== intent.key || !rows.some((r) => `ch_${r.id}` === answered?.id)) lost.push(intent.key);
      } else lost.push(`${intent.key} (final ${first.status}: ${new TextDecoder().decode(first.body).slice(0, 200)})`);
    }
    const violations: string[] = [];
    if (doubleEffects > 0) violations.push(`${doubleEffects} keys with more than one effect in the upstream's ledger`);
    if (lost.length > 0)
      violations.push(`${lost.length} intents lost (acknowledged without their effect, or a final non-2xx), e.g. ${lost.slice(0, 3).join(', ')}`);
    if (differing > 0) violations.push(`${differing} intents whose answers (copies, retries, replay) were not byte-identical`);
    if (unanswered > 0) violations.push(`${unanswered} intents got no final answer within ${o.horizonMs} ms:\n${samples.join('\n')}`);
    elapsed.sort((a, b) => a - b);
    return {
      mode: 'gateway',
      intents: intents.length,
      duplicateSends,
      attempts,
      kills: counts.kills,
      freezes: counts.freezes,
      connectionsCut: { total: counts.cuts, midTransaction: counts.cutsMidTx },
      upstreamAttempts,
      takenOver,
      staleFenced,
      doubleEffects,
      lost: lost.length,
      unanswered,
      differing,
      failedPermanently,
      p50Ms: percentile(elapsed, 0.5),
      p99Ms: percentile(elapsed, 0.99),
      durationMs: Date.now() - started,
      violations,
    };
  } finally {
    stopping = true;
    for (const slot of slots) {
      slot.child?.kill('SIGCONT');
      slot.child?.kill('SIGKILL');
    }
    upstream.stop();
    await front.close().catch(() => undefined);
    await proxy.close().catch(() => undefined);
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch(() => undefined);
    await admin.end().catch(() => undefined);
    rmSync(entry, { force: true });
    rmSync(dir, { recursive: true, force: true });
  }
}
