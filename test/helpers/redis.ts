/**
 * Redis for the tests: clients on the machine's Redis (REDIS_URL, default
 * redis://127.0.0.1:6379) with a random key prefix each, and a real 3-master Redis Cluster
 * started on random loopback ports (redis-server --cluster-enabled yes, then redis-cli
 * --cluster create), stopped after.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { randomUUID } from 'node:crypto';
import { createClient, createCluster } from '@redis/client';
import { Redis, Cluster } from 'ioredis';
import type { RedisClientLike } from '../../src/redis/index.js';

const run = promisify(execFile);

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

/**
 * The Redis suites run when REDIS_URL is set (as .ci/run does), like the PostgreSQL ones with
 * DATABASE_URL; elsewhere they are skipped with this reason.
 */
export const redisSkip: string | false = process.env.REDIS_URL ? false : 'set REDIS_URL (e.g. redis://127.0.0.1:6379) to run the Redis suites';

/** A random key prefix, so parallel runs never collide. */
export const randomPrefix = (): string => `idem-test-${randomUUID().slice(0, 8)}`;

/** A client under test, with a raw command function for assertions. */
export interface TestClient {
  name: string;
  client: RedisClientLike;
  /** Runs a raw command on the node owning `key`. */
  raw(key: string, args: string[]): Promise<unknown>;
  close(): Promise<void>;
}

/** node-redis and ioredis clients on the single Redis. */
export const singleClients: Array<{ name: string; open(): Promise<TestClient> }> = [
  {
    name: 'node-redis',
    async open() {
      const client = createClient({ url: REDIS_URL });
      await client.connect();
      return { name: 'node-redis', client, raw: (_k, args) => client.sendCommand(args), close: async () => void client.destroy() };
    },
  },
  {
    name: 'ioredis',
    async open() {
      const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
      await client.connect();
      return { name: 'ioredis', client, raw: (_k, args) => client.call(args[0]!, ...args.slice(1)), close: async () => void client.disconnect() };
    },
  },
];

/**
 * Valkey GLIDE (`@valkey/valkey-glide`, a devDependency with a native binding) on the single
 * Redis: imported when a test opens it, so the other Redis tests run without it.
 */
export const glideSingle: { name: string; open(): Promise<TestClient> } = {
  name: 'Valkey GLIDE',
  async open() {
    const { GlideClient } = await import('@valkey/valkey-glide');
    const url = new URL(REDIS_URL);
    const client = await GlideClient.createClient({ addresses: [{ host: url.hostname, port: Number(url.port || 6379) }], requestTimeout: 10_000 });
    return {
      name: 'Valkey GLIDE',
      client,
      raw: async (_k, args) => glideFlat(await client.customCommand(args)),
      close: async () => client.close(),
    };
  },
};

/** GLIDE answers a RESP3 map as `[{ key, value }, …]`: as the flat array the other drivers give. */
function glideFlat(reply: unknown): unknown {
  if (!Array.isArray(reply) || reply.length === 0 || typeof reply[0] !== 'object' || reply[0] === null || !('key' in reply[0])) return reply;
  return (reply as Array<{ key: unknown; value: unknown }>).flatMap((e) => [e.key, e.value]);
}

/** Deletes every key under `prefix` on a single Redis. */
export async function dropPrefix(t: TestClient, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = (await t.raw('', ['SCAN', cursor, 'MATCH', `${prefix}:*`, 'COUNT', '1000'])) as [string, string[]];
    cursor = String(next);
    if (keys.length > 0) for (const k of keys) await t.raw(k, ['DEL', k]);
  } while (cursor !== '0');
}

async function freePort(): Promise<number> {
  // A port whose cluster bus port (+10000) is free too.
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 30000);
    if ((await isFree(port)) && (await isFree(port + 10000))) return port;
  }
}

function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

async function waitFor(check: () => Promise<boolean>, what: string, ceilingMs = 60_000): Promise<void> {
  const start = performance.now();
  while (!(await check().catch(() => false))) {
    if (performance.now() - start > ceilingMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const cli = async (port: number, ...args: string[]): Promise<string> =>
  (await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], { timeout: 120_000 })).stdout;

/** A running 3-master Redis Cluster on loopback. */
export interface TestCluster {
  ports: number[];
  /** Node ids by port. */
  nodeIds(): Promise<Map<number, string>>;
  /** Moves `slots` slots from the node on `fromPort` to the node on `toPort` (redis-cli --cluster reshard). */
  reshard(fromPort: number, toPort: number, slots: number): Promise<void>;
  stop(): Promise<void>;
}

/** Starts a 3-master cluster and waits for `cluster_state:ok` on every node. */
export async function startCluster(): Promise<TestCluster> {
  const dir = await mkdtemp(join(tmpdir(), 'idem-cluster-'));
  const ports: number[] = [];
  const procs: ChildProcess[] = [];
  for (let i = 0; i < 3; i++) {
    let port = await freePort();
    while (ports.includes(port)) port = await freePort();
    ports.push(port);
    const proc = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        `nodes-${port}.conf`,
        '--dir',
        dir,
        '--save',
        '',
        '--appendonly',
        'no',
        '--cluster-node-timeout',
        '5000',
      ],
      { stdio: 'ignore' },
    );
    procs.push(proc);
  }
  const stop = async () => {
    for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL');
    await Promise.all(procs.map((p) => (p.exitCode === null ? new Promise((r) => p.once('exit', r)) : undefined)));
    await rm(dir, { recursive: true, force: true });
  };
  try {
    for (const port of ports) await waitFor(async () => (await cli(port, 'PING')).trim() === 'PONG', `redis-server on ${port}`);
    await run('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '0', '--cluster-yes'], { timeout: 120_000 });
    for (const port of ports) await waitFor(async () => (await cli(port, 'CLUSTER', 'INFO')).includes('cluster_state:ok'), `cluster_state:ok on ${port}`);
  } catch (error) {
    await stop();
    throw error;
  }
  const nodeIds = async () => new Map(await Promise.all(ports.map(async (p) => [p, (await cli(p, 'CLUSTER', 'MYID')).trim()] as [number, string])));
  return {
    ports,
    nodeIds,
    async reshard(fromPort, toPort, slots) {
      const ids = await nodeIds();
      await run(
        'redis-cli',
        [
          '--cluster',
          'reshard',
          `127.0.0.1:${ports[0]}`,
          '--cluster-from',
          ids.get(fromPort)!,
          '--cluster-to',
          ids.get(toPort)!,
          '--cluster-slots',
          String(slots),
          '--cluster-yes',
          '--cluster-pipeline',
          '10',
        ],
        { timeout: 300_000 },
      );
    },
    stop,
  };
}

/** A GLIDE `GlideClusterClient` on `cluster` (see {@link glideSingle}). */
export function glideCluster(cluster: TestCluster): { name: string; open(): Promise<TestClient> } {
  return {
    name: 'Valkey GLIDE cluster',
    async open() {
      const { GlideClusterClient } = await import('@valkey/valkey-glide');
      const client = await GlideClusterClient.createClient({ addresses: cluster.ports.map((port) => ({ host: '127.0.0.1', port })), requestTimeout: 10_000 });
      return {
        name: 'Valkey GLIDE cluster',
        client,
        raw: async (k, args) => glideFlat(await client.customCommand(args, { route: { type: 'primarySlotKey', key: k } })),
        close: async () => client.close(),
      };
    },
  };
}

/** node-redis and ioredis cluster clients on `cluster`. */
export function clusterClients(cluster: TestCluster): Array<{ name: string; open(): Promise<TestClient> }> {
  return [
    {
      name: 'node-redis cluster',
      async open() {
        const client = createCluster({ rootNodes: cluster.ports.map((p) => ({ url: `redis://127.0.0.1:${p}` })) });
        await client.connect();
        return { name: 'node-redis cluster', client, raw: (k, args) => client.sendCommand(k, false, args), close: async () => void client.destroy() };
      },
    },
    {
      name: 'ioredis cluster',
      async open() {
        const client = new Cluster(
          cluster.ports.map((port) => ({ host: '127.0.0.1', port })),
          { lazyConnect: true },
        );
        await client.connect();
        return { name: 'ioredis cluster', client, raw: (_k, args) => client.call(args[0]!, ...args.slice(1)), close: async () => void client.disconnect() };
      },
    },
  ];
}

/** A Redis primary and one replica on loopback, started by {@link startReplicaPair}. */
export interface ReplicaPair {
  primaryPort: number;
  replicaPort: number;
  primary: ChildProcess;
  replica: ChildProcess;
  stop(): Promise<void>;
}

/**
 * Starts a primary and a replica (`--replicaof`) on random loopback ports, with `extraArgs`
 * on both (e.g. `--appendonly yes`), and waits until the replica's link is up.
 */
export async function startReplicaPair(extraArgs: string[] = []): Promise<ReplicaPair> {
  const dir = await mkdtemp(join(tmpdir(), 'idem-replica-'));
  const primaryPort = await freePort();
  let replicaPort = await freePort();
  while (replicaPort === primaryPort) replicaPort = await freePort();
  const server = (port: number, args: string[]) =>
    spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--dir',
        dir,
        '--dbfilename',
        `dump-${port}.rdb`,
        '--appendfilename',
        `aof-${port}.aof`,
        '--appenddirname',
        `aof-${port}`,
        '--save',
        '',
        ...extraArgs,
        ...args,
      ],
      { stdio: 'ignore' },
    );
  const primary = server(primaryPort, []);
  const replica = server(replicaPort, ['--replicaof', '127.0.0.1', String(primaryPort)]);
  const procs = [primary, replica];
  const stop = async () => {
    for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    await Promise.all(procs.map((p) => (p.exitCode === null && p.signalCode === null ? new Promise((r) => p.once('exit', r)) : undefined)));
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await waitFor(async () => (await cli(replicaPort, 'INFO', 'replication')).includes('master_link_status:up'), 'replica link up');
  } catch (error) {
    await stop();
    throw error;
  }
  return { primaryPort, replicaPort, primary, replica, stop };
}
