/**
 * Wait mode on MySQL and MariaDB by polling (protocol.md K17): neither server can notify, so
 * each key a duplicate of this process waits for is read again on a timer, one primary-key read
 * (sql-operator.ts `pollKey`) per poll, and its waiters wake when what a finish, release,
 * discard or takeover changes (token, state, released flag, lease end, or the row itself) differs
 * from the last read. Polls of a key start `minMs` after its watch and back off ×2 to `maxMs`
 * while it does not change; a key nobody waits for is not read. A failed poll wakes the key's
 * waiters (they read again, and time out or are answered as the engine decides) and polls on.
 */
import type { ChangeFeed, KeyChangeHub } from '../store/key-changes.js';
import type { MySqlRow } from './client.js';
import { b, type MySqlContext } from './context.js';

/** How often a waited-for key is read: from `minMs` after the watch, doubling to `maxMs`. */
export interface PollSettings {
  minMs: number;
  maxMs: number;
}

/** The default poll: 25 ms, then 50, 100, … up to 500 ms between reads of one waited-for key. */
export const DEFAULT_POLL: PollSettings = { minMs: 25, maxMs: 500 };

/** What a poll compares: the key's row as the changes K17 names leave it, or `gone`. */
const signature = (row: MySqlRow | undefined): string =>
  row ? `${String(row.lock_version)}|${String(row.state)}|${String(row.released)}|${String(row.locked_until_ms)}` : 'gone';

/** A {@link ChangeFeed} that reads each watched key on a timer; see the module comment. */
export class PollingFeed implements ChangeFeed {
  hub: KeyChangeHub | undefined;
  private readonly watched = new Map<string, { timer: NodeJS.Timeout | undefined; last: string; delay: number }>();

  constructor(
    private readonly ctx: MySqlContext,
    private readonly poll: PollSettings = DEFAULT_POLL,
  ) {}

  /** Reads the key once (the baseline a change is told from), then polls it until {@link unwatch}. */
  async watch(id: string, scope: string, key: string): Promise<void> {
    const entry = { timer: undefined as NodeJS.Timeout | undefined, last: '', delay: this.poll.minMs };
    this.watched.set(id, entry);
    const read = async () => signature((await this.ctx.db.rows(this.ctx.sql.pollKey, [b(scope), b(key)]))[0]);
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
