/** What `idem dashboard` shows of the key table: read-only, bounded lists, no bodies, no credentials. */
import { inspect, type KeyInspection, type StoreStats, stats } from './inspect.js';
import type { StoreContext } from './options.js';
import type { Row } from './rows.js';
import { dateOrNull } from './values.js';

/** One key in a dashboard list. */
export interface DashboardKey {
  scope: string;
  key: string;
  state: string;
  recoveryPoint: string | null;
  createdAt: Date;
  /** Stuck keys only: when the lease ended (null: released by a version before release kept the time). */
  lockedUntil?: Date | null;
  /** Stuck keys only: the fencing token, as decimal text. */
  token?: string;
}

/** The dashboard's overview; see `PostgresStore.dashboard`. */
export interface DashboardData {
  table: string;
  mode: 'plain' | 'partitioned';
  retentionMs: number;
  stats: StoreStats;
  /** Keys created in the last 24 h by UTC hour and current state. */
  timeline: Array<{ hour: string; state: string; count: number }>;
  /** Started, lease over, within retention: work nobody is doing. */
  stuck: DashboardKey[];
  oldest: DashboardKey[];
  /** Past retention, not yet swept. */
  pastRetention: DashboardKey[];
}

function toKey(row: Row): DashboardKey {
  const key: DashboardKey = {
    scope: String(row.scope),
    key: String(row.key),
    state: String(row.state ?? 'started'),
    recoveryPoint: row.recovery_point == null ? null : String(row.recovery_point),
    createdAt: dateOrNull(row.created_at) ?? new Date(0),
  };
  if ('locked_until' in row) key.lockedUntil = dateOrNull(row.locked_until);
  if ('lock_version' in row) key.token = String(row.lock_version);
  return key;
}

/** See `PostgresStore.dashboard`. */
export async function dashboard(ctx: StoreContext, retentionMs: number, limit: number): Promise<DashboardData> {
  const q = (text: string, params: unknown[]) => ctx.db.query(text, params).then((r) => r.rows as Row[]);
  const [health, timeline, stuck, oldest, past] = await Promise.all([
    stats(ctx, retentionMs),
    q(ctx.sql.dashboardTimeline, []),
    q(ctx.sql.dashboardStuck, [retentionMs, limit]),
    q(ctx.sql.dashboardOldest, [retentionMs, limit]),
    q(ctx.sql.dashboardPastRetention, [retentionMs, limit]),
  ]);
  return {
    table: ctx.table,
    mode: ctx.partitioning ? 'partitioned' : 'plain',
    retentionMs,
    stats: health,
    timeline: timeline.map((r) => ({ hour: String(r.hour), state: String(r.state), count: Number(r.n) })),
    stuck: stuck.map((r) => toKey({ ...r, state: 'started' })),
    oldest: oldest.map(toKey),
    pastRetention: past.map(toKey),
  };
}

/** The dashboard's key inspector: `inspect` with the phase results left out (they may hold business data). */
export async function dashboardInspect(
  ctx: StoreContext,
  scope: string,
  key: string,
  retentionMs: number,
): Promise<(Omit<KeyInspection, 'phaseResults'> & { phases: string[] }) | undefined> {
  const found = await inspect(ctx, scope, key, retentionMs);
  if (!found) return undefined;
  const { phaseResults, ...rest } = found;
  return { ...rest, phases: Object.keys(phaseResults) };
}
