/**
 * The slice of a Redis client idem uses, declared locally so neither driver is a dependency
 * (both are optional peers): node-redis v5+ (`redis` / `@redis/client`: a client or a cluster)
 * and ioredis (`Redis` or `Cluster`). Every command goes through the driver's raw command
 * call, so the store needs four shapes of one method, nothing else. The client is told apart
 * once, when the store is built ({@link resolveDriver}).
 */

/** node-redis client (`createClient()`): `sendCommand(args, options?)`. */
export interface NodeRedisClientLike {
  sendCommand(args: string[], options?: NodeRedisCommandOptions): Promise<unknown>;
}

/** The one command option idem passes to node-redis: its own per-command timeout (`0`: none). */
export interface NodeRedisCommandOptions {
  timeout?: number;
}

/** node-redis cluster (`createCluster()`): `sendCommand(firstKey, isReadonly, args)` routes by the key's slot. */
export interface NodeRedisClusterLike {
  sendCommand(firstKey: string | undefined, isReadonly: boolean | undefined, args: string[], options?: NodeRedisCommandOptions): Promise<unknown>;
  /** Present on a cluster only; tells it apart from a client. */
  readonly masters: unknown;
}

/** ioredis `Redis` or `Cluster`: `call(command, ...args)`; a Cluster routes by the command's keys. */
export interface IoRedisLike {
  call(command: string, ...args: string[]): Promise<unknown>;
  /** `true` on an ioredis `Cluster`. */
  readonly isCluster?: boolean;
}

/** Any client the store accepts. */
export type RedisClientLike = NodeRedisClientLike | NodeRedisClusterLike | IoRedisLike;

/**
 * A client as told apart once, when the store is built: which driver, and whether it is a
 * cluster. Every part that treats the drivers differently (the runner, the settings refused,
 * the silent-link reset, the subscriber) switches on this, never on the client's shape.
 */
export type RedisDriver =
  | { readonly kind: 'ioredis'; readonly cluster: boolean; readonly client: IoRedisLike }
  | { readonly kind: 'node-redis'; readonly cluster: false; readonly client: NodeRedisClientLike }
  | { readonly kind: 'node-redis'; readonly cluster: true; readonly client: NodeRedisClusterLike };

/**
 * Tells `client` apart: an ioredis `Redis` or `Cluster` has `call` (`isCluster` on a Cluster),
 * node-redis has `sendCommand` (`masters` on a cluster).
 * @throws {TypeError} when `client` matches none of the supported shapes
 */
export function resolveDriver(client: RedisClientLike): RedisDriver {
  const c = client as unknown as Record<string, unknown> | null;
  if (typeof c === 'object' && c !== null) {
    if (typeof c.call === 'function') {
      const io = client as IoRedisLike;
      return { kind: 'ioredis', cluster: io.isCluster === true, client: io };
    }
    if (typeof c.sendCommand === 'function') {
      return 'masters' in c
        ? { kind: 'node-redis', cluster: true, client: client as NodeRedisClusterLike }
        : { kind: 'node-redis', cluster: false, client: client as NodeRedisClientLike };
    }
  }
  throw new TypeError('idem/redis: client must be a node-redis client or cluster, or an ioredis Redis or Cluster');
}
