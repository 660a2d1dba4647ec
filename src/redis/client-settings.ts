/**
 * Client settings idem knows to be unrecoverable, refused when the store is built
 * (protocol.md H25): a node-redis client that, once its connection drops, never reconnects
 * and answers every later command with `ClientClosedError`, so the service would answer 503
 * until it is restarted.
 */
import type { RedisDriver } from './client.js';

/** The part of node-redis's `socket` options read here. */
interface NodeRedisSocketOptions {
  socketTimeout?: number;
  reconnectStrategy?: unknown;
}

/** What the reconnect strategy to pass looks like, in the error message. */
const STRATEGY_EXAMPLE = 'socket: { reconnectStrategy: (retries) => Math.min(50 * 2 ** retries, 2000) }';

/**
 * Why `socket` (node-redis socket options, of a client or a cluster's `defaults`) never reconnects, or
 * `undefined`: `socketTimeout` without a `reconnectStrategy`. node-redis's default strategy gives
 * up on a socket timeout, so the first idle spell longer than `socketTimeout` (the timer counts
 * inactivity, also on a healthy link) closes the client for good: a trap of the defaults. A
 * strategy that gives up on purpose (`false`, or one returning an Error: a tool that must not
 * reconnect to a killed server) is the application's choice and passes.
 */
function unrecoverable(socket: NodeRedisSocketOptions | undefined, where: string): string | undefined {
  if (!socket) return undefined;
  if (socket.reconnectStrategy === undefined && typeof socket.socketTimeout === 'number' && socket.socketTimeout > 0)
    return `${where}.socketTimeout is set without ${where}.reconnectStrategy: node-redis's default strategy does not reconnect after a socket timeout (an idle spell longer than socketTimeout closes the client for good), and every request would get 503 until a restart. Pass ${STRATEGY_EXAMPLE}, or drop socketTimeout`;
  return undefined;
}

/**
 * Checks the settings of a node-redis client or cluster; an ioredis or GLIDE client reconnects
 * with its defaults and passes. Returns the reason to refuse the client, or `undefined`.
 */
export function refusedClientSettings(driver: RedisDriver): string | undefined {
  if (driver.kind !== 'node-redis') return undefined;
  const c = driver.client as {
    options?: { socket?: NodeRedisSocketOptions };
    _options?: { defaults?: { socket?: NodeRedisSocketOptions } };
  };
  // A cluster's node clients take `defaults`; its root nodes only serve discovery (node-redis
  // itself sets their reconnectStrategy to false).
  if (driver.cluster) return unrecoverable(c._options?.defaults?.socket, 'defaults.socket');
  return unrecoverable(c.options?.socket, 'socket');
}
