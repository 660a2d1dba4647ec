/**
 * HTTP load with autocannon against a server child process (bench/lib/server.ts).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import autocannon from 'autocannon';
import type { Stats } from './measure.js';

export interface Server {
  url: string;
  stop(): Promise<void>;
}

/**
 * Starts `bench/lib/server.ts <kind> …` (or another `script` that prints `{"url": …}` when it
 * listens) and waits for its URL; `nodeArgs` go to node (e.g. `--cpu-prof`).
 */
export async function startServer(kind: string, args: string[], nodeArgs: string[] = [], script = 'bench/lib/server.ts'): Promise<Server> {
  const child: ChildProcess = spawn(process.execPath, [...nodeArgs, '--import', 'tsx', script, kind, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, NODE_ENV: 'production' },
  });
  const url = await new Promise<string>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.once('line', (line) => resolve((JSON.parse(line) as { url: string }).url));
    child.once('exit', (code) => reject(new Error(`bench server ${kind} exited with ${code} before listening`)));
  });
  return {
    url,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

const BODY = JSON.stringify({ amount: 100, currency: 'eur' });

/** Sends one POST with an idempotency key; returns the status. */
export async function post(url: string, key: string): Promise<number> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: BODY });
  await res.arrayBuffer();
  return res.status;
}

/** Creates `count` finished keys on `url` (for replay runs). */
export async function seedKeys(url: string, prefix: string, count: number): Promise<string[]> {
  const keys = Array.from({ length: count }, (_, i) => `${prefix}-${i}-${randomUUID()}`);
  for (let i = 0; i < keys.length; i += 16) {
    const statuses = await Promise.all(keys.slice(i, i + 16).map((k) => post(url, k)));
    if (statuses.some((s) => s !== 201)) throw new Error(`seeding ${url} answered ${statuses.join(',')}`);
  }
  return keys;
}

/** HTTP throughput (2xx per second) and latency of one autocannon run. */
export interface HttpStats extends Stats {
  non2xx: number;
  errors: number;
}

/**
 * Runs autocannon for `seconds` on `connections` connections. `key()` gives each request's
 * idempotency key (a fresh UUID for new requests, a seeded key for replays, none for bare).
 */
export async function cannon(url: string, connections: number, seconds: number, key?: () => string): Promise<HttpStats> {
  const result = await autocannon({
    url,
    connections,
    duration: seconds,
    requests: [
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: BODY,
        setupRequest: (req: { headers?: Record<string, string> }) => {
          if (key) req.headers = { ...req.headers, 'idempotency-key': key() };
          return req;
        },
      },
    ],
  } as autocannon.Options);
  const ok = result['2xx'];
  return {
    opsPerSec: ok / result.duration,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    ops: ok,
    non2xx: result.non2xx,
    errors: result.errors,
  };
}

/** A key source cycling through `keys`. */
export function cycle(keys: string[]): () => string {
  let i = 0;
  return () => keys[i++ % keys.length]!;
}

/** Fires `k` concurrent duplicates of one fresh key at `url`; returns the handler's run count and the statuses. */
export async function duplicates(base: string, path: string, k: number, prefix: string): Promise<{ runs: number; statuses: number[] }> {
  const key = `${prefix}-dup-${randomUUID()}`;
  const statuses = await Promise.all(Array.from({ length: k }, () => post(base + path, key)));
  // Let late handlers (a response stored after it was sent) settle before counting.
  await new Promise((resolve) => setTimeout(resolve, 100));
  const res = await fetch(`${base}/__runs?key=${encodeURIComponent(key)}`);
  const { runs } = (await res.json()) as { runs: number };
  return { runs, statuses };
}
