/**
 * Valkey GLIDE (`@valkey/valkey-glide` v2) as the store's client (protocol.md K55): commands by
 * `customCommand` (on a `GlideClusterClient` routed to the primary of the key's slot), scripts
 * by GLIDE's own `Script` objects and `invokeScript` (GLIDE sends EVALSHA and loads the script
 * on NOSCRIPT itself), wait mode's subscriber a second GLIDE client made from the first's
 * configuration. GLIDE is an optional peer: its `Script` class is imported the first time a
 * GLIDE store runs a script, never when this module loads (so node-redis and ioredis users
 * need no GLIDE installed), and from the application's own `@valkey/valkey-glide`: the one
 * its client comes from, whose native side keeps the scripts.
 */
import type { GlideClientLike, GlideClusterClientLike, GlideScriptLike, RedisDriver } from './client.js';
import { SCRIPTS, type ScriptName } from './scripts.js';

let scripts: Promise<Record<ScriptName, GlideScriptLike>> | undefined;

/**
 * The store's scripts as GLIDE `Script`s, made once per process and kept for its life (a
 * `Script` lives in GLIDE's native side until released; these few are never released).
 */
function glideScripts(): Promise<Record<ScriptName, GlideScriptLike>> {
  scripts ??= import('@valkey/valkey-glide').then(
    ({ Script }) => {
      const made: Partial<Record<ScriptName, GlideScriptLike>> = {};
      for (const name of Object.keys(SCRIPTS) as ScriptName[]) made[name] = new Script(SCRIPTS[name]);
      return made as Record<ScriptName, GlideScriptLike>;
    },
    (error: unknown) => {
      scripts = undefined;
      throw error;
    },
  );
  return scripts;
}

/**
 * GLIDE's `Decoder.String`, asked for on every command and script: a client made with
 * `defaultDecoder: Decoder.Bytes` would otherwise answer Buffers where the store compares strings.
 */
const DECODE_STRING = 1;

/** Sends a raw command: on a cluster to the primary of `key`'s slot (a keyless WAIT or TIME included). */
export function glideSend(driver: Extract<RedisDriver, { kind: 'glide' }>): (key: string, args: string[]) => Promise<unknown> {
  if (!driver.cluster) {
    const client = driver.client;
    return (_key, args) => client.customCommand(args, { decoder: DECODE_STRING }).then(flatMap);
  }
  const client = driver.client;
  return (key, args) => client.customCommand(args, { route: { type: 'primarySlotKey', key }, decoder: DECODE_STRING }).then(flatMap);
}

/** Runs a named script with `invokeScript` (on a cluster, GLIDE routes it by its keys). */
export function glideScript(client: GlideClientLike | GlideClusterClientLike): (name: ScriptName, keys: string[], args: string[]) => Promise<unknown> {
  return async (name, keys, args) => client.invokeScript((await glideScripts())[name], { keys, args, decoder: DECODE_STRING });
}

/**
 * GLIDE speaks RESP3 and answers a map (HGETALL) as `[{ key, value }, …]`: flattened to the
 * `[field, value, …]` of RESP2, as the other drivers answer. Other replies pass unchanged.
 */
function flatMap(reply: unknown): unknown {
  if (!Array.isArray(reply) || reply.length === 0) return reply;
  const first = reply[0] as unknown;
  if (typeof first !== 'object' || first === null || Array.isArray(first) || !('key' in first) || !('value' in first)) return reply;
  return (reply as Array<{ key: unknown; value: unknown }>).flatMap((e) => [e.key, e.value]);
}

/** A GLIDE pub/sub message, as its callback receives it. */
interface GlidePubSubMsg {
  channel: unknown;
}

/** The `GlideClusterClient` a subscriber is made of: its class's `createClient`, its configuration. */
interface GlideClusterSubscriberLike {
  ssubscribe(channels: Iterable<string>, timeoutMs: number): Promise<void>;
  sunsubscribe(channels: Iterable<string> | null, timeoutMs: number): Promise<void>;
  close(): void;
}

interface GlideClusterClass {
  createClient(config: Record<string, unknown>): Promise<GlideClusterSubscriberLike>;
}

/**
 * Wait mode's subscriber on a `GlideClusterClient` (protocol.md K55): a second client of the
 * same class made from the first's configuration (addresses, credentials, TLS), with a
 * message callback and no subscription at first; each watched key's shard channel is then
 * `SSUBSCRIBE`d on it (GLIDE 2's dynamic `ssubscribe`, which follows the channel's slot and
 * subscribes again after a reconnect). The application's client never subscribes, so its own
 * pub/sub (and its message queue) is untouched. `timeoutMs` bounds each (un)subscribe.
 */
export function glideClusterSubscriber(
  client: GlideClusterClientLike,
  onMessage: (channel: string) => void,
  timeoutMs: number,
): { subscribe(channel: string): Promise<unknown>; unsubscribe(channel: string): Promise<unknown>; close(): void } {
  const own = client as unknown as { constructor: GlideClusterClass; config?: Record<string, unknown> };
  const opened = own.constructor.createClient({
    ...own.config,
    pubsubSubscriptions: { channelsAndPatterns: {}, callback: (msg: GlidePubSubMsg) => onMessage(String(msg.channel)) },
  });
  opened.catch(() => undefined);
  // GLIDE's own wait: 0 is "forever"; the store's deadline (KeyChangeHub) bounds the watch anyway.
  const wait = timeoutMs > 0 && Number.isFinite(timeoutMs) ? timeoutMs : 0;
  return {
    subscribe: async (channel) => (await opened).ssubscribe([channel], wait),
    unsubscribe: async (channel) => (await opened).sunsubscribe([channel], wait),
    close: () => {
      opened.then(
        (sub) => sub.close(),
        () => undefined,
      );
    },
  };
}
