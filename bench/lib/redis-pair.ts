/**
 * Redis servers for the failover benchmarks (bench/redis-failover.ts,
 * bench/redis-failover-effects.ts): a primary and replicas on loopback ports of their own,
 * the replication link of the first replica through a TCP relay that can stall.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import { createServer, connect as tcpConnect, type Socket } from 'node:net';
import { createClient } from '@redis/client';

/** A node-redis client on a loopback port that never reconnects (the server may be killed). */
export async function connect(port: number) {
  const client = createClient({ url: `redis://127.0.0.1:${port}`, socket: { reconnectStrategy: false } });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

/** SIGKILLs `p` and resolves once it exited. */
export const killed = (p: ChildProcess) =>
  new Promise<void>((resolve) => {
    if (p.exitCode !== null || p.signalCode !== null) return resolve();
    p.once('exit', () => resolve());
    p.kill('SIGKILL');
  });

const exec = promisify(execFile);
/** A free loopback port. */
export const freePort = () =>
  new Promise<number>((resolve) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });

/** A redis-server on a loopback port, no snapshots, its files in `dir`. */
export const redisServer = (dir: string, port: number, args: string[] = []): ChildProcess =>
  spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--dbfilename', `d${port}.rdb`, '--save', '', ...args], {
    stdio: 'ignore',
  });

/**
 * A primary and a replica whose replication link runs through a TCP relay, so the link can
 * stall (the relay stops reading from the primary: the stream waits in the primary's output
 * buffer, as behind a network hiccup). Freezing the replica (SIGSTOP) or dropping its
 * connection would not do: the kernel buffers the stream for a frozen replica, and a dropped
 * one resynchronises from the backlog within milliseconds. `extraReplicas`: more replicas,
 * attached directly (their link never stalls).
 */
export async function startPair(dir: string, extraReplicas = 0) {
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
  const primary = redisServer(dir, primaryPort);
  await waitUntil(primaryPort, 'PING', 'PONG');
  const replica = redisServer(dir, replicaPort, ['--replicaof', '127.0.0.1', String(relayPort)]);
  await waitUntil(replicaPort, 'INFO', 'master_link_status:up');
  const extra: Array<{ port: number; server: ChildProcess }> = [];
  for (let i = 0; i < extraReplicas; i++) {
    const port = await freePort();
    extra.push({ port, server: redisServer(dir, port, ['--replicaof', '127.0.0.1', String(primaryPort)]) });
    await waitUntil(port, 'INFO', 'master_link_status:up');
  }
  const started: ChildProcess[] = [];
  return {
    primaryPort,
    replicaPort,
    extraPorts: extra.map((e) => e.port),
    primary,
    stall: () => {
      for (const s of upstream) s.pause();
    },
    /** Starts one more server (stopped with the pair), e.g. a new replica after a failover. */
    async spawn(args: string[]) {
      const port = await freePort();
      started.push(redisServer(dir, port, args));
      return port;
    },
    async stop() {
      for (const p of [primary, replica, ...extra.map((e) => e.server), ...started]) await killed(p);
      relay.close();
      for (const s of upstream) s.destroy();
    },
  };
}

/** Polls `redis-cli -p port command` every 100 ms until its output holds `expected` (60 s at most). */
export async function waitUntil(port: number, command: string, expected: string): Promise<void> {
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
