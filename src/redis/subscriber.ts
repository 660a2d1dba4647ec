/**
 * Wait mode on Redis (protocol.md K17): the takeover, finish, release, discard and adopt
 * scripts send `SPUBLISH <hash key> 1` themselves, in the script that changes the key, so the
 * message leaves exactly when the change is applied (never for a fenced write). The channel is
 * the key's own hash name: a shard channel in the key's slot, so on Cluster the message stays
 * on the key's shard. This file is the subscribing side: one subscriber connection per client
 * (per shard on Cluster), opened at the first wait, with one `SSUBSCRIBE` per key waited for
 * (shared by every waiter of that key in this process), never one connection per waiter.
 *
 * After the subscriber reconnects (the driver resubscribes), every waiter is woken to read the
 * key again: a change sent while it was away reaches them by that read. A loss the driver does
 * not report (a Cluster shard's subscriber) is covered by the waiter's own deadline read. A
 * server without `SSUBSCRIBE` (Redis before 7) cannot wake waiters: they read at their deadline
 * (protocol.md K24).
 */
import type { ChangeFeed, KeyChangeHub } from '../store/key-changes.js';
import type { RedisDriver } from './client.js';
import { glideClusterSubscriber } from './glide.js';

/** node-redis client (`duplicate()` opens the subscriber connection). */
interface NodeRedisSubscriberLike {
  connect(): Promise<unknown>;
  sSubscribe(channel: string, listener: (message: string, channel: string) => void): Promise<unknown>;
  sUnsubscribe(channel: string, listener?: (message: string, channel: string) => void): Promise<unknown>;
  destroy(): void;
  on(event: string, fn: (...args: unknown[]) => void): unknown;
}

/** ioredis `Redis` or `Cluster` as the subscriber (`duplicate()`). */
interface IoRedisSubscriberLike {
  ssubscribe(channel: string): Promise<unknown>;
  sunsubscribe(channel: string): Promise<unknown>;
  ping?(): Promise<unknown>;
  disconnect(): void;
  on(event: string, fn: (...args: unknown[]) => void): unknown;
}

/** How often an ioredis Cluster subscriber re-reads the slot map, in ms, when the user's client sets no interval. */
const SLOT_REFRESH_MS = 2000;

/** A subscriber connection (or a Cluster's per-shard set of them) for shard channels. */
interface ShardSubscriber {
  subscribe(channel: string): Promise<unknown>;
  unsubscribe(channel: string): Promise<unknown>;
  /** Closes the connection(s) opened for it (none for a node-redis cluster's own). */
  close(): void;
}

/**
 * Opens the subscriber of `client`: a node-redis client's or an ioredis client's duplicate; a
 * node-redis cluster's own sharded subscribers (one per shard, kept across slot moves); an
 * ioredis Cluster's duplicate with `shardedSubscribers`; a `GlideClusterClient`'s second client
 * (src/redis/glide.ts). `onMessage` gets the channel; `onResubscribed` runs after the subscriber
 * reconnected and subscribed again (GLIDE reports no such event: its waiters' deadline read covers it).
 */
function openSubscriber(driver: RedisDriver, onMessage: (channel: string) => void, onResubscribed: () => void, timeoutMs: number): ShardSubscriber {
  const client = driver.client;
  const c = client as unknown as Record<string, unknown>;
  const listener = (_message: string, channel: string) => onMessage(channel);
  // A standalone GlideClient has no sharded pub/sub: its store polls instead (store.ts, protocol.md K55).
  if (driver.kind === 'glide') {
    if (!driver.cluster) throw new Error('idem/redis: a standalone GlideClient has no sharded pub/sub (its store polls)');
    return glideClusterSubscriber(driver.client, onMessage, timeoutMs);
  }
  if (driver.kind === 'ioredis') {
    const dup = c.duplicate as (...args: unknown[]) => IoRedisSubscriberLike;
    // ioredis follows a moved slot's shard channel by refreshing its slot map when the old
    // owner drops the subscription; a refresh answered by a node not yet told of the move keeps
    // the old map, and without a periodic refresh the channel would stay unsubscribed until the
    // waiter's deadline read. The subscriber's own refresh interval (when the user set none) heals
    // that within SLOT_REFRESH_MS; it runs only while the subscriber is open (a wait is pending).
    const refresh = (c.options as { slotsRefreshInterval?: number } | undefined)?.slotsRefreshInterval;
    const sub = driver.cluster ? dup.call(client, undefined, { shardedSubscribers: true, slotsRefreshInterval: refresh || SLOT_REFRESH_MS }) : dup.call(client);
    sub.on('smessage', (channel) => onMessage(String(channel)));
    sub.on('error', () => undefined); // the driver reconnects; a wait meanwhile ends at its deadline
    let readies = 0;
    sub.on('ready', () => {
      // The resubscriptions are sent after 'ready'; a PING's reply comes after theirs.
      if (readies++ > 0) (sub.ping ? sub.ping() : Promise.resolve()).then(onResubscribed, onResubscribed);
    });
    return { subscribe: (channel) => sub.ssubscribe(channel), unsubscribe: (channel) => sub.sunsubscribe(channel), close: () => sub.disconnect() };
  }
  if (driver.cluster) {
    // A node-redis cluster keeps one pub/sub connection per shard and moves subscriptions with their slot.
    const cl = client as unknown as Pick<NodeRedisSubscriberLike, 'sSubscribe' | 'sUnsubscribe'>;
    return { subscribe: (channel) => cl.sSubscribe(channel, listener), unsubscribe: (channel) => cl.sUnsubscribe(channel, listener), close: () => undefined };
  }
  const sub = (c.duplicate as () => NodeRedisSubscriberLike).call(client);
  sub.on('error', () => undefined);
  let readies = 0;
  // node-redis resubscribes before it reports 'ready'.
  sub.on('ready', () => {
    if (readies++ > 0) onResubscribed();
  });
  const connected = sub.connect();
  connected.catch(() => undefined);
  return {
    subscribe: async (channel) => {
      await connected;
      return sub.sSubscribe(channel, listener);
    },
    unsubscribe: async (channel) => {
      await connected;
      return sub.sUnsubscribe(channel, listener);
    },
    close: () => {
      // At once, also while it is still connecting or reconnecting (a server unreachable): a
      // close that waited for the connection would leave it retrying for good.
      try {
        sub.destroy();
      } catch {
        // Already closed (its reconnect strategy gave up).
      }
    },
  };
}

/** True for a server's answer that it has no such command: a Redis before 7 has no `SSUBSCRIBE`. */
function isUnknownCommand(error: unknown): boolean {
  return error instanceof Error && /^ERR unknown command/i.test(error.message);
}

/** How long an idle subscriber stays open for the next wait, in ms (it then closes, so an idle process holds no extra connection). */
const IDLE_CLOSE_MS = 1000;

/** The change feed of a `RedisStore`: shard channels named by each key's hash, opened at the first wait. */
export class ShardChannelFeed implements ChangeFeed {
  private subscriber: ShardSubscriber | undefined;
  private idle: ReturnType<typeof setTimeout> | undefined;
  /** Key ids by channel, while watched. */
  private readonly ids = new Map<string, string>();
  private readonly channels = new Map<string, string>();
  /** The last (un)subscribe sent per channel, so a watch follows the unwatch before it. */
  private readonly pending = new Map<string, Promise<unknown>>();
  hub: KeyChangeHub | undefined;
  /**
   * Set once the server answered that it has no `SSUBSCRIBE` (Redis before 7, protocol.md
   * K24): nothing can wake a waiter, so a watch is active at once and never fires; each waiter
   * reads its key at its wait's end, then answers as K17 says (the 409, never a 503).
   */
  private cannotWake = false;

  constructor(
    private readonly driver: RedisDriver,
    private readonly channelOf: (scope: string, key: string) => string,
    /** Bounds a GLIDE subscriber's own wait for each (un)subscribe (the store's `storeTimeoutMs`). */
    private readonly timeoutMs = 0,
  ) {}

  watch(id: string, scope: string, key: string): Promise<void> {
    if (this.cannotWake) return Promise.resolve();
    const channel = this.channelOf(scope, key);
    clearTimeout(this.idle);
    this.ids.set(channel, id);
    this.channels.set(id, channel);
    // Subscribes only while still watched: a subscribe queued behind an earlier unsubscribe of
    // a waiter that has left meanwhile would open a subscriber that no idle close follows.
    return this.serially(channel, () => (this.ids.has(channel) ? this.connection().subscribe(channel) : undefined)).then(
      () => undefined,
      (error: unknown) => {
        if (!isUnknownCommand(error)) throw error;
        this.refused();
      },
    );
  }

  /** The server cannot wake waiters (protocol.md K24): said once, and no subscriber stays open. */
  private refused(): void {
    if (this.cannotWake) return;
    this.cannotWake = true;
    this.subscriber?.close();
    this.subscriber = undefined;
    globalThis.process?.emitWarning?.(
      'idem/redis: this Redis server has no SSUBSCRIBE (Redis before 7), so nothing wakes a waiting duplicate: each one reads its key once when its inProgress.wait ends, then replays or gets the 409',
      { code: 'IDEM_REDIS_NO_SHARDED_PUBSUB' },
    );
  }

  unwatch(id: string): void {
    const channel = this.channels.get(id);
    if (channel === undefined) return;
    this.channels.delete(id);
    this.ids.delete(channel);
    // On the subscriber that subscribed, never a new one (closed meanwhile: nothing to undo).
    const sub = this.subscriber;
    if (sub) this.serially(channel, () => (sub === this.subscriber ? sub.unsubscribe(channel) : undefined)).catch(() => undefined);
    if (this.ids.size > 0) return;
    clearTimeout(this.idle);
    this.idle = setTimeout(() => {
      if (this.ids.size > 0) return;
      this.subscriber?.close();
      this.subscriber = undefined;
    }, IDLE_CLOSE_MS);
    this.idle.unref?.();
  }

  private connection(): ShardSubscriber {
    if (this.subscriber) return this.subscriber;
    // A closed subscriber's late events (a reconnect's 'ready' and its PING failing) wake no one.
    const sub: ShardSubscriber = openSubscriber(
      this.driver,
      (channel) => {
        const id = this.ids.get(channel);
        if (id !== undefined && this.subscriber === sub) this.hub?.changed(id);
      },
      () => {
        if (this.subscriber === sub) this.hub?.lost();
      },
      this.timeoutMs,
    );
    this.subscriber = sub;
    return sub;
  }

  private serially(channel: string, fn: () => Promise<unknown> | undefined): Promise<unknown> {
    const before = this.pending.get(channel) ?? Promise.resolve();
    const run = before.then(fn, fn);
    const settled = run.catch(() => undefined);
    this.pending.set(channel, settled);
    settled.then(() => {
      if (this.pending.get(channel) === settled) this.pending.delete(channel);
    });
    return run;
  }
}
