/**
 * Failover of idem/redis, measured: `npx tsx bench/redis-failover.ts [--trials 5] [--ms 1500]`.
 *
 * Replica rows: a primary and a replica on loopback; 32 concurrent claim loops of new keys on
 * the primary; after `--ms` the primary is SIGKILLed in the middle of the stream, the replica
 * promoted (`REPLICAOF NO ONE`), and every key whose claim had been ACKNOWLEDGED is claimed
 * again on it: a `claimed` answer means the key's work would run again (a duplicate). Once
 * without `durability` (asynchronous replication) and once with `durability: { replicas: 1 }`
 * (WAIT after each claim).
 *
 * AOF rows: one server with `appendonly yes`, `appendfsync always` or `everysec`; the same
 * stream, SIGKILL, restart on the same directory, re-claim every acknowledged key.
 *
 * Prints a Markdown table (paste into docs/reliability.md). Not a test.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { createClient } from '@redis/client';
import { RedisStore, type DurabilityOptions } from '../src/redis/index.js';
import { createServer, connect as tcpConnect, type Socket } from 'node:net';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const TRIALS = arg('trials', 5);
const RUN_MS = arg('ms', 1500);
const CONCURRENCY = 32;
const fp = new Uint8Array(32).fill(7);

interface Trial {
  acked: number;
  rerun: number;
  claimsPerS: number;
}

/** Claims new keys at CONCURRENCY until `stop()`; returns the acknowledged keys. */
function stream(store: RedisStore) {
  const acked: string[] = [];
  let stopped = false;
  const started = performance.now();
  const loops = Array.from({ length: CONCURRENCY }, async () => {
    while (!stopped) {
      const key = randomUUID();
      try {
        const r = await store.claim({ scope: 'fo', key, fingerprint: fp, leaseMs: 60_000, retentionMs: 3_600_000 });
        if (r.kind === 'claimed' && !stopped) acked.push(key);
      } catch {
        return; // the primary is gone
      }
    }
  });
  return {
    acked,
    async stop() {
      stopped = true;
      await Promise.all(loops);
      return (performance.now() - started) / 1000;
    },
  };
}

async function connect(port: number) {
  const client = createClient({ url: `redis://127.0.0.1:${port}`, socket: { reconnectStrategy: false } });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

/** Re-claims every key on `port`: how many would run again. */
async function rerunCount(port: number, prefix: string, keys: string[]): Promise<number> {
  const client = await connect(port);
  try {
    const store = new RedisStore({ client, prefix });
    let rerun = 0;
    for (let i = 0; i < keys.length; i += 256) {
      const batch = await Promise.all(
        keys.slice(i, i + 256).map((key) => store.claim({ scope: 'fo', key, fingerprint: fp, leaseMs: 60_000, retentionMs: 3_600_000 })),
      );
      rerun += batch.filter((r) => r.kind === 'claimed').length;
    }
    return rerun;
  } finally {
    client.destroy();
  }
}

const killed = (p: ChildProcess) =>
  new Promise<void>((resolve) => {
    if (p.exitCode !== null || p.signalCode !== null) return resolve();
    p.once('exit', () => resolve());
    p.kill('SIGKILL');
  });

const exec = promisify(execFile);
const freePort = () =>
  new Promise<number>((resolve) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });

/**
 * A primary and a replica whose replication link runs through a TCP relay, so the link can
 * stall (the relay stops reading from the primary: the stream waits in the primary's output
 * buffer, as behind a network hiccup). Freezing the replica (SIGSTOP) or dropping its
 * connection would not do: the kernel buffers the stream for a frozen replica, and a dropped
 * one resynchronises from the backlog within milliseconds.
 */
async function startPair(dir: string) {
  const primaryPort = await freePort();
  const replicaPort = await freePort();
  const upstream: Socket[] = [];
  const relay = createServer((down) => {
    const up = tcpConnect(primaryPort, '127.0.0.1');
    upstream.push(up);
    down.pipe(up).on('error', () => undefined);
    up.pipe(down).on('error', () => undefined);
    up.on('error', () => down.destroy());
    down.on('error', () => up.destroy());
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', () => resolve()));
  const relayPort = (relay.address() as { port: number }).port;
  const server = (port: number, args: string[]) =>
    spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--dbfilename', `d${port}.rdb`, '--save', '', ...args], {
      stdio: 'ignore',
    });
  const primary = server(primaryPort, []);
  await waitUntil(primaryPort, 'PING', 'PONG');
  const replica = server(replicaPort, ['--replicaof', '127.0.0.1', String(relayPort)]);
  await waitUntil(replicaPort, 'INFO', 'master_link_status:up');
  return {
    primaryPort,
    replicaPort,
    primary,
    stall: () => {
      for (const s of upstream) s.pause();
    },
    async stop() {
      await killed(primary);
      await killed(replica);
      relay.close();
      for (const s of upstream) s.destroy();
    },
  };
}

async function waitUntil(port: number, command: string, expected: string): Promise<void> {
  for (let i = 0; i < 600; i++) {
    const out = await exec('redis-cli', ['-p', String(port), command]).then(
      (r) => r.stdout,
      () => '',
    );
    if (out.includes(expected)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`redis on ${port}: no ${expected}`);
}

/**
 * `stallMs`: the replication link stalls for the last `stallMs` before the primary dies.
 */
async function replicaTrial(durability?: DurabilityOptions, stallMs = 0): Promise<Trial> {
  const dir = await mkdtemp(join(tmpdir(), 'idem-failover-'));
  const pair = await startPair(dir);
  try {
    const client = await connect(pair.primaryPort);
    const prefix = `fo-${randomUUID().slice(0, 8)}`;
    const run = stream(new RedisStore({ client, prefix, ...(durability ? { durability } : {}) }));
    await new Promise((r) => setTimeout(r, RUN_MS - stallMs));
    if (stallMs > 0) {
      pair.stall();
      await new Promise((r) => setTimeout(r, stallMs));
    }
    await killed(pair.primary); // mid-stream: claims in flight
    const seconds = await run.stop();
    client.destroy();
    const replica = await connect(pair.replicaPort);
    await replica.sendCommand(['REPLICAOF', 'NO', 'ONE']);
    replica.destroy();
    const rerun = await rerunCount(pair.replicaPort, prefix, run.acked);
    return { acked: run.acked.length, rerun, claimsPerS: run.acked.length / seconds };
  } finally {
    await pair.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

async function aofTrial(fsync: 'always' | 'everysec'): Promise<Trial> {
  const dir = await mkdtemp(join(tmpdir(), 'idem-aof-'));
  const port = 20000 + Math.floor(Math.random() * 30000);
  const start = () =>
    spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', fsync], {
      stdio: 'ignore',
    });
  // Answers PING with PONG only once the AOF is loaded.
  const ready = () => waitUntil(port, 'PING', 'PONG');
  let server = start();
  try {
    await ready();
    const client = await connect(port);
    const prefix = `fo-${randomUUID().slice(0, 8)}`;
    const run = stream(new RedisStore({ client, prefix }));
    await new Promise((r) => setTimeout(r, RUN_MS));
    await killed(server);
    const seconds = await run.stop();
    client.destroy();
    server = start();
    await ready();
    const rerun = await rerunCount(port, prefix, run.acked);
    return { acked: run.acked.length, rerun, claimsPerS: run.acked.length / seconds };
  } finally {
    await killed(server);
    await rm(dir, { recursive: true, force: true });
  }
}

async function rows(name: string, trial: () => Promise<Trial>): Promise<string> {
  const trials: Trial[] = [];
  for (let i = 0; i < TRIALS; i++) trials.push(await trial());
  const acked = trials.reduce((s, t) => s + t.acked, 0);
  const rerun = trials.reduce((s, t) => s + t.rerun, 0);
  const worst = Math.max(...trials.map((t) => t.rerun));
  const rate = trials.reduce((s, t) => s + t.claimsPerS, 0) / trials.length;
  const line = `| ${name} | ${TRIALS} | ${acked} | ${rerun} (${((rerun / Math.max(1, acked)) * 100).toFixed(3)} %) | ${worst} | ${Math.round(rate)} |`;
  console.error(line);
  return line;
}

const table = [
  `| setup | trials | acknowledged claims | keys that run again | worst trial | claims/s (c=${CONCURRENCY}) |`,
  '|---|---|---|---|---|---|',
  await rows('primary + replica, async replication (no `durability`), SIGKILL + `REPLICAOF NO ONE`', () => replicaTrial()),
  await rows('primary + replica, `durability: { replicas: 1, timeoutMs: 1000 }` (WAIT), SIGKILL + promote', () =>
    replicaTrial({ replicas: 1, timeoutMs: 1000 }),
  ),
  await rows('same, async, replication link stalled for the last 300 ms before the primary dies', () => replicaTrial(undefined, 300)),
  await rows('same, WAIT (timeoutMs 200), replication link stalled for the last 300 ms', () => replicaTrial({ replicas: 1, timeoutMs: 200 }, 300)),
  await rows('one server, AOF `appendfsync always`, SIGKILL + restart', () => aofTrial('always')),
  await rows('one server, AOF `appendfsync everysec`, SIGKILL + restart', () => aofTrial('everysec')),
];
console.log(
  `Measured ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC with \`npx tsx bench/redis-failover.ts --trials ${TRIALS} --ms ${RUN_MS}\` (redis-server ${process.env.REDIS_VERSION ?? '7.0'}, loopback, ${CONCURRENCY} claim loops, primary killed ${RUN_MS} ms into the stream):\n`,
);
console.log(table.join('\n'));
process.exit(0);
