/**
 * Valkey GLIDE (`@valkey/valkey-glide` v2) as the store's client (protocol.md K55): commands by
 * `customCommand` (on a `GlideClusterClient` routed to the primary of the key's slot), scripts
 * by GLIDE's own `Script` objects and `invokeScript` (GLIDE sends EVALSHA and loads the script
 * on NOSCRIPT itself), wait mode's subscriber a second GLIDE client made from the first's
 * configuration. GLIDE is an optional peer: its `Script` class is imported the first time a
 * GLIDE store runs a script, never when this module loads.
 */
import type { GlideClientLike, GlideClusterClientLike, GlideScriptLike, RedisDriver } from './client.js';
import { SCRIPTS, type ScriptName } from './scripts.js';

/** The part of `@valkey/valkey-glide` imported: the `Script` class. */
interface GlideModule {
  Script: new (code: string) => GlideScriptLike;
}

/** The package name, in a variable so that TypeScript and bundlers leave the optional import alone. */
const GLIDE_PACKAGE = '@valkey/valkey-glide';

let scripts: Promise<Record<ScriptName, GlideScriptLike>> | undefined;

/**
 * The store's scripts as GLIDE `Script`s, made once per process and kept for its life (a
 * `Script` lives in GLIDE's native side until released; these few are never released).
 */
function glideScripts(): Promise<Record<ScriptName, GlideScriptLike>> {
  scripts ??= (import(GLIDE_PACKAGE) as Promise<GlideModule>).then(
    ({ Script }) => Object.fromEntries(Object.entries(SCRIPTS).map(([name, text]) => [name, new Script(text)])) as Record<ScriptName, GlideScriptLike>,
    (error: unknown) => {
      scripts = undefined;
      throw error;
    },
  );
  return scripts;
}

/** Sends a raw command: on a cluster to the primary of `key`'s slot (a keyless WAIT or TIME included). */
export function glideSend(driver: Extract<RedisDriver, { kind: 'glide' }>): (key: string, args: string[]) => Promise<unknown> {
  if (!driver.cluster) {
    const client = driver.client;
    return (_key, args) => client.customCommand(args).then(flatMap);
  }
  const client = driver.client;
  return (key, args) => client.customCommand(args, { route: { type: 'primarySlotKey', key } }).then(flatMap);
}

/** Runs a named script with `invokeScript` (on a cluster, GLIDE routes it by its keys). */
export function glideScript(client: GlideClientLike | GlideClusterClientLike): (name: ScriptName, keys: string[], args: string[]) => Promise<unknown> {
  return async (name, keys, args) => client.invokeScript((await glideScripts())[name], { keys, args });
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
