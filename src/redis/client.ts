/**
 * The slice of a Redis client idem uses, declared locally so no driver is a dependency (all
 * are optional peers): node-redis v5+ (`redis` / `@redis/client`: a client or a cluster),
 * ioredis (`Redis` or `Cluster`) and Valkey GLIDE (`@valkey/valkey-glide`: `GlideClient` or
 * `GlideClusterClient`). Every command goes through the driver's raw command call (GLIDE's
 * scripts through its `Script` objects, protocol.md K55), so the store needs a few shapes of
 * one method, nothing else. The client is told apart once, when the store is built
 * ({@link resolveDriver}).
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

/** The one route idem gives a GLIDE cluster command: the primary of `key`'s slot. */
export interface GlideRoute {
  type: 'primarySlotKey';
  key: string;
}

/**
 * Valkey GLIDE `GlideClient` (v2): `customCommand` for commands, `invokeScript` with a GLIDE
 * `Script` for scripts (GLIDE sends EVALSHA and loads the script itself on NOSCRIPT).
 */
export interface GlideClientLike {
  customCommand(args: string[], options?: { decoder?: number }): Promise<unknown>;
  invokeScript(script: GlideScriptLike, options?: { keys?: string[]; args?: string[]; decoder?: number }): Promise<unknown>;
}

/** Valkey GLIDE `GlideClusterClient` (v2): a command routed to the primary of a key's slot. */
export interface GlideClusterClientLike {
  customCommand(args: string[], options?: { route?: GlideRoute; decoder?: number }): Promise<unknown>;
  invokeScript(script: GlideScriptLike, options?: { keys?: string[]; args?: string[]; decoder?: number }): Promise<unknown>;
  /** Sharded pub/sub, on a `GlideClusterClient` only: tells it apart from a `GlideClient`. */
  ssubscribe(channels: Iterable<string>, timeoutMs: number): Promise<void>;
}

/** A GLIDE `Script` (its code kept in GLIDE's native side, named by its SHA1). */
export interface GlideScriptLike {
  getHash(): string;
}

/** Any client the store accepts. */
export type RedisClientLike = NodeRedisClientLike | NodeRedisClusterLike | IoRedisLike | GlideClientLike | GlideClusterClientLike;

/**
 * A client as told apart once, when the store is built: which driver, and whether it is a
 * cluster. Every part that treats the drivers differently (the runner, the settings refused,
 * the silent-link reset, the subscriber) switches on this, never on the client's shape.
 */
export type RedisDriver =
  | { readonly kind: 'ioredis'; readonly cluster: boolean; readonly client: IoRedisLike }
  | { readonly kind: 'node-redis'; readonly cluster: false; readonly client: NodeRedisClientLike }
  | { readonly kind: 'node-redis'; readonly cluster: true; readonly client: NodeRedisClusterLike }
  | { readonly kind: 'glide'; readonly cluster: false; readonly client: GlideClientLike }
  | { readonly kind: 'glide'; readonly cluster: true; readonly client: GlideClusterClientLike };

/**
 * Tells `client` apart: an ioredis `Redis` or `Cluster` has `call` (`isCluster` on a Cluster),
 * node-redis has `sendCommand` (`masters` on a cluster), GLIDE has `customCommand` and
 * `invokeScript` (`ssubscribe` on a `GlideClusterClient`).
 * @throws {TypeError} when `client` matches none of the supported shapes
 */
export function resolveDriver(client: RedisClientLike): RedisDriver {
  const c = client as unknown as Record<string, unknown> | null;
  if (typeof c === 'object' && c !== null) {
    if (typeof c.call === 'function') {
      const io = client as IoRedisLike;
      return { kind: 'ioredis', cluster: io.isCluster === true, client: io };
    }
    if (typeof c.customCommand === 'function' && typeof c.invokeScript === 'function') {
      return typeof c.ssubscribe === 'function'
        ? { kind: 'glide', cluster: true, client: client as GlideClusterClientLike }
        : { kind: 'glide', cluster: false, client: client as GlideClientLike };
    }
    if (typeof c.sendCommand === 'function') {
      return 'masters' in c
        ? { kind: 'node-redis', cluster: true, client: client as NodeRedisClusterLike }
        : { kind: 'node-redis', cluster: false, client: client as NodeRedisClientLike };
    }
  }
  throw new TypeError(
    'idem/redis: client must be a node-redis client or cluster, an ioredis Redis or Cluster, or a Valkey GLIDE GlideClient or GlideClusterClient',
  );
}
