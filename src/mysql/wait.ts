/**
 * Wait mode on MySQL and MariaDB by polling (protocol.md K17, K45): neither server can notify,
 * so each key a duplicate of this process waits for is read again on a timer
 * (src/store/polling-feed.ts), one primary-key read (sql-operator.ts `pollKey`) per poll.
 */
import type { PollRead } from '../store/polling-feed.js';
import type { MySqlRow } from './client.js';
import { b, type MySqlContext } from './context.js';

export { DEFAULT_POLL, PollingFeed, type PollSettings } from '../store/polling-feed.js';

/** What a poll compares: the key's row as the changes K17 names leave it, or `gone`. */
const signature = (row: MySqlRow | undefined): string =>
  row ? `${String(row.lock_version)}|${String(row.state)}|${String(row.released)}|${String(row.locked_until_ms)}` : 'gone';

/** The poll's read of one key on `ctx`'s table. */
export function pollRead(ctx: MySqlContext): PollRead {
  return async (scope, key) => signature((await ctx.db.rows(ctx.sql.pollKey, [b(scope), b(key)]))[0]);
}
