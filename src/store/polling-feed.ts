/**
 * Wait mode by polling (protocol.md K17), for stores whose database cannot notify (MySQL and
 * MariaDB, K45; SQLite, K51): each key a duplicate of this process waits for is read again on a
 * timer, one read per poll (the store's `read`, e.g. one primary-key SELECT), and its waiters wake
 * when what a finish, release, discard or takeover changes (the store's signature of the row:
 * token, state, released flag, lease end, or the row itself gone) differs from the last read.
 * Polls of a key start `minMs` after its watch and back off ×2 to `maxMs` while it does not
 * change; a key nobody waits for is not read. A failed poll wakes the key's waiters (they read
 * again, and time out or are answered as the engine decides) and polls on.
 */
import type { ChangeFeed, KeyChangeHub } from './key-changes.js';

/** How often a waited-for key is read: from `minMs` after the watch, doubling to `maxMs`. */
export interface PollSettings {
  minMs: number;
  maxMs: number;
}

/** The default poll: 25 ms, then 50, 100, … up to 500 ms between reads of one waited-for key. */
export const DEFAULT_POLL: PollSettings = { minMs: 25, maxMs: 500 };

/** Reads one key's signature: a string that changes whenever a change K17 names commits (`gone` when absent). */
export type PollRead = (scope: string, key: string) => Promise<string>;

/** A {@link ChangeFeed} that reads each watched key on a timer; see the module comment. */
export class PollingFeed implements ChangeFeed {
  hub: KeyChangeHub | undefined;
  private readonly watched = new Map<string, { timer: NodeJS.Timeout | undefined; last: string; delay: number }>();

  constructor(
    private readonly read: PollRead,
    private readonly poll: PollSettings = DEFAULT_POLL,
  ) {}

  /** Reads the key once (the baseline a change is told from), then polls it until {@link unwatch}. */
  async watch(id: string, scope: string, key: string): Promise<void> {
    const entry = { timer: undefined as NodeJS.Timeout | undefined, last: '', delay: this.poll.minMs };
    this.watched.set(id, entry);
    const read = () => this.read(scope, key);
    try {
      entry.last = await read();
    } catch (error) {
      this.unwatch(id);
      throw error;
    }
    const tick = async () => {
      let changed: boolean;
      try {
        const now = await read();
        changed = now !== entry.last;
        entry.last = now;
      } catch {
        changed = true; // unknown: the waiters read again
      }
      if (this.watched.get(id) !== entry) return; // unwatched meanwhile
      entry.delay = changed ? this.poll.minMs : Math.min(this.poll.maxMs, entry.delay * 2);
      if (changed) this.hub?.changed(id);
      schedule();
    };
    const schedule = () => {
      entry.timer = setTimeout(() => void tick(), entry.delay);
      entry.timer.unref?.();
    };
    if (this.watched.get(id) === entry) schedule();
  }

  unwatch(id: string): void {
    const entry = this.watched.get(id);
    if (!entry) return;
    clearTimeout(entry.timer);
    this.watched.delete(id);
  }
}

/**
 * Checks `waitPoll` options against the defaults.
 * @returns the settings, or undefined when they are not minMs > 0 and maxMs >= minMs
 */
export function pollSettings(options: Partial<PollSettings> | undefined): PollSettings | undefined {
  const poll = { ...DEFAULT_POLL, ...options };
  return poll.minMs > 0 && poll.maxMs >= poll.minMs ? poll : undefined;
}
