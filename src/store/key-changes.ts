/**
 * Wait mode's key subscriptions (protocol.md K17), shared by every store that can wake waiters:
 * the waiters of this process by key, each a latch that a change sets and `next` consumes. A
 * store supplies a {@link ChangeFeed} (PostgreSQL: `LISTEN` on the table's channel; Redis: a
 * subscription to the key's channel on one subscriber connection; memory: nothing, the store
 * itself reports its changes) and calls {@link KeyChangeHub.changed} when a key changed and
 * {@link KeyChangeHub.lost} when changes may have been missed (a subscriber reconnecting).
 */
import { hasNotify } from './capabilities.js';
import { withDeadline } from './deadline.js';
import type { IdempotencyStore, KeyChanges } from './types.js';

/**
 * Why `store` cannot serve wait mode (protocol.md K17), or `undefined` when it can: the one place
 * that decides it. A store can when it declares `notify`; its `noSubscribe` only explains, in the
 * refusal, a store that does not (and is ignored on a store that does).
 */
export function waitRefusal(store: Pick<IdempotencyStore<unknown>, 'capabilities' | 'noSubscribe'>): string | undefined {
  if (hasNotify(store)) return undefined;
  const why = store.noSubscribe ? ` (${store.noSubscribe})` : '';
  return `idem: inProgress.wait needs a store that can wake waiters (subscribe), e.g. new PostgresStore({ client, notify: true })${why}`;
}

/** Duplicates waiting in this process now, across engines and stores (protocol.md K34 3). */
let waitingNow = 0;

/**
 * Subscribes a duplicate to (scope, key) of `store` unless `maxWaiters` duplicates of this
 * process already wait (protocol.md K34 3): then `undefined`, holding nothing. The place is
 * held until the subscription is closed (or subscribing failed).
 */
export async function startWaiting(
  store: Pick<IdempotencyStore<unknown>, 'subscribe'>,
  scope: string,
  key: string,
  maxWaiters: number,
): Promise<KeyChanges | undefined> {
  if (waitingNow >= maxWaiters) return undefined;
  waitingNow++;
  let changes: KeyChanges;
  try {
    changes = await store.subscribe!(scope, key);
  } catch (error) {
    waitingNow--;
    throw error;
  }
  let held = true;
  return {
    get seen() {
      return changes.seen;
    },
    next: (timeoutMs, signal) => changes.next(timeoutMs, signal),
    close() {
      if (held) waitingNow--;
      held = false;
      changes.close();
    },
  };
}

/** Where a store's change notifications come from, per key id ({@link keyId}). */
export interface ChangeFeed {
  /** Starts delivering changes of (scope, key), whose id is `id`, to the hub; resolves once a change committed from now on is delivered. */
  watch(id: string, scope: string, key: string): Promise<void>;
  /** Stops delivering changes of `id` (the last waiter of the key left). */
  unwatch(id: string): void;
}

/** The id of (scope, key) in notifications: the scope's length in code points, `:`, the scope, the key (unambiguous). */
export function keyId(scope: string, key: string): string {
  return `${[...scope].length}:${scope}${key}`;
}

/** A feed with nothing to set up: the store reports its own changes (the memory store, one process). */
export const IN_PROCESS: ChangeFeed = { watch: () => Promise.resolve(), unwatch: () => undefined };

/** The key subscriptions of one store; see the module comment. */
export class KeyChangeHub {
  private readonly subs = new Map<string, { ready: Promise<void>; set: Set<Subscription> }>();
  /** Notifications received for watched keys, plus one per loss and per fresh watch (see `KeyChanges.seen`). */
  seen = 0;

  /**
   * @param feed where changes come from
   * @param timeoutMs the store's deadline (`storeTimeoutMs`, protocol.md H17) for a watch to
   *   become active; past it `subscribe` rejects with a `StoreTimeoutError` (the engine's 503)
   */
  constructor(
    private readonly feed: ChangeFeed,
    private readonly timeoutMs = 0,
  ) {}

  /** True while some waiter of this process waits for a key of the store. */
  get active(): boolean {
    return this.subs.size > 0;
  }

  /** See `IdempotencyStore.subscribe`. */
  async subscribe(scope: string, key: string): Promise<KeyChanges> {
    const id = keyId(scope, key);
    let entry = this.subs.get(id);
    if (!entry) {
      // A fresh watch: a shared read issued before it may miss a change, so none is joined.
      this.seen++;
      const ready = withDeadline(this.feed.watch(id, scope, key), this.timeoutMs, 'idem: subscribing to a key took longer than storeTimeoutMs');
      entry = { ready, set: new Set<Subscription>() };
      this.subs.set(id, entry);
    }
    const sub = new Subscription(this, () => this.close(id, sub));
    entry.set.add(sub);
    try {
      await entry.ready;
    } catch (error) {
      sub.close();
      throw error;
    }
    return sub;
  }

  /** The key `id` changed: wake its waiters. Costs one map lookup when nobody waits for it. */
  changed(id: string): void {
    const entry = this.subs.get(id);
    if (!entry) return;
    this.seen++;
    for (const sub of entry.set) sub.wake();
  }

  /** Changes may have been missed (the feed's connection was lost): every waiter reads again. */
  lost(): void {
    this.seen++;
    for (const entry of this.subs.values()) for (const sub of entry.set) sub.wake();
  }

  private close(id: string, sub: Subscription): void {
    const entry = this.subs.get(id);
    if (!entry?.set.delete(sub) || entry.set.size > 0) return;
    this.subs.delete(id);
    // At once, so a new watch of the same key that follows is sent after this unwatch (also
    // after a watch that failed or timed out: a feed's unwatch undoes whatever of it happened).
    this.feed.unwatch(id);
  }
}

/** One waiter's subscription: a latch that a notification sets and `next` consumes. */
class Subscription implements KeyChanges {
  private changed = false;
  private closed = false;
  private waiter: (() => void) | undefined;

  constructor(
    private readonly hub: KeyChangeHub,
    private readonly onClose: () => void,
  ) {}

  get seen(): number {
    return this.hub.seen;
  }

  wake(): void {
    this.changed = true;
    this.waiter?.();
  }

  next(timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    if (this.changed || this.closed || signal?.aborted || !(timeoutMs > 0)) {
      const changed = this.changed;
      this.changed = false;
      return Promise.resolve(changed);
    }
    return new Promise<boolean>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        this.waiter = undefined;
        const changed = this.changed;
        this.changed = false;
        resolve(changed);
      };
      const timer = setTimeout(done, timeoutMs);
      signal?.addEventListener('abort', done, { once: true });
      this.waiter = done;
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.waiter?.();
    this.onClose();
  }
}
