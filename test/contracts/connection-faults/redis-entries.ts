/**
 * The Redis clients of the connection-fault contract (./entry.ts), each configured as
 * docs/connection-faults-redis.md says: node-redis and ioredis on the machine's Redis
 * (REDIS_URL), and both on a 3-master Redis Cluster the entry starts on loopback (test side,
 * in `servers()`, stopped in `cleanup`). The child reaches the Cluster's nodes through the
 * proxies by the clients' address maps (node-redis `nodeAddressMap`, ioredis `natMap`): the
 * nodes announce their own ports.
 */
import { createClient, createCluster } from '@redis/client';
import { Cluster, Redis } from 'ioredis';
import { RedisStore, type RedisClientLike } from '../../../src/redis/index.js';
import { REDIS_URL, startCluster, type TestCluster } from '../../helpers/redis.js';
import type { Endpoint, FaultEntry, OpenContext, OpenedStore } from './entry.js';

/** Longer than every timer: idem's silentLinkMs (3 × storeTimeoutMs of 1000); the clients have their defaults. */
const IDLE_MS = 4000;
/**
 * The Cluster's node ports, from the test side to the child (the environment passes through):
 * one variable per entry, as the contract runs entries side by side, each with its own cluster.
 */
const clusterPortsVar = (entry: string) => `FAULT_CLUSTER_PORTS_${entry.replace(/\W+/g, '_').toUpperCase()}`;

const single = (): Endpoint => {
  const url = new URL(REDIS_URL);
  return { host: url.hostname, port: Number(url.port || 6379) };
};

function store(client: RedisClientLike, ctx: OpenContext, close: () => void): OpenedStore {
  return { store: new RedisStore({ client, prefix: ctx.name, storeTimeoutMs: ctx.storeTimeoutMs }), close: async () => close() };
}

/** Deletes the run's keys on the single Redis. */
async function dropSingle(name: string): Promise<void> {
  const client = createClient({ url: REDIS_URL });
  await client.connect();
  try {
    for await (const keys of client.scanIterator({ MATCH: `${name}:*`, COUNT: 1000 })) if (keys.length > 0) await client.del(keys);
  } finally {
    client.destroy();
  }
}

/** A Cluster entry: the test side starts a cluster per run; the child reads its ports. */
function clusterEntry(name: string, open: (ctx: OpenContext, nodes: Endpoint[]) => Promise<OpenedStore>, resendsCut = false): FaultEntry {
  let cluster: TestCluster | undefined;
  const nodes = (ports: number[]) => ports.map((port) => ({ host: '127.0.0.1', port }));
  return {
    name,
    needs: 'REDIS_URL',
    resendsCut,
    async servers() {
      cluster = await startCluster();
      process.env[clusterPortsVar(name)] = cluster.ports.join(',');
      return nodes(cluster.ports);
    },
    idleMs: IDLE_MS,
    open: (ctx) => open(ctx, nodes((process.env[clusterPortsVar(name)] ?? '').split(',').map(Number))),
    async cleanup() {
      await cluster?.stop();
    },
  };
}

/** The Redis entries, in the order the contract runs them. */
export const redisEntries: FaultEntry[] = [
  {
    name: 'node-redis',
    needs: 'REDIS_URL',
    servers: () => [single()],
    idleMs: IDLE_MS,
    async open(ctx) {
      const to = ctx.via(single());
      const client = createClient({ socket: { host: to.host, port: to.port } });
      client.on('error', () => undefined); // the application's listener: without one, a dropped connection ends the process
      await client.connect();
      return store(client, ctx, () => client.destroy());
    },
    cleanup: dropSingle,
  },
  {
    name: 'ioredis',
    needs: 'REDIS_URL',
    servers: () => [single()],
    idleMs: IDLE_MS,
    resendsCut: true,
    async open(ctx) {
      const to = ctx.via(single());
      const client = new Redis({ host: to.host, port: to.port, lazyConnect: true });
      client.on('error', () => undefined);
      await client.connect();
      return store(client, ctx, () => client.disconnect());
    },
    cleanup: dropSingle,
  },
  clusterEntry('node-redis Cluster', async (ctx, nodes) => {
    const map = Object.fromEntries(nodes.map((n) => [`${n.host}:${n.port}`, ctx.via(n)]));
    const client = createCluster({
      rootNodes: nodes.map((n) => ({ socket: ctx.via(n) })),
      nodeAddressMap: map,
    });
    client.on('error', () => undefined);
    await client.connect();
    return store(client, ctx, () => client.destroy());
  }),
  clusterEntry(
    'ioredis Cluster',
    async (ctx, nodes) => {
      const natMap = Object.fromEntries(nodes.map((n) => [`${n.host}:${n.port}`, ctx.via(n)]));
      const client = new Cluster(
        nodes.map((n) => ctx.via(n)),
        { natMap, lazyConnect: true },
      );
      client.on('error', () => undefined);
      await client.connect();
      return store(client, ctx, () => client.disconnect());
    },
    true,
  ),
];
