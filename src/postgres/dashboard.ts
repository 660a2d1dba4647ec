/** What `idem dashboard` shows of the key table: read-only, bounded lists, no bodies, no credentials. */
import type { KeyInspection, StoreStats } from '../store/inspection.js';
import { inspect, stats } from './inspect.js';
import type { StoreContext } from './context.js';
import type { Row } from './rows.js';
import { dateOrNull } from './values.js';

/** One key in a dashboard list. */
export interface DashboardKey {
  scope: string;
  key: string;
  state: string;
  recoveryPoint: string | null;
  createdAt: Date;
  /** Failed attempts as the store counted them (`failed_attempts`, for `maxAttempts`). */
  failedAttempts: number;
  /** Stuck keys only: when the lease ended (null: released by a version before release kept the time). */
  lockedUntil?: Date | null;
  /** Stuck keys only: the fencing token, as decimal text. */
  token?: string;
  /** Stuck keys only: a request snapshot is stored, so `idem complete` can finish the key without a retry. */
  requestStored?: boolean;
  /** Failing keys only: the stored response's status (null: none stored yet). */
  responseStatus?: number | null;
  /**
   * Failing keys only: the `type` of the stored problem+json response (e.g.
   * `urn:idem:problem:request-failed-permanently`); null when none is stored, or it is sealed,
   * out of line or not a problem document. The only member of a body the dashboard reads.
   */
  problemType?: string | null;
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
  /** Within retention, with failed attempts or a stored 5xx response, newest first. */
  failing: DashboardKey[];
  oldest: DashboardKey[];
  /** Past retention, not yet swept. */
  pastRetention: DashboardKey[];
}

/** The dashboard's inspector: {@link KeyInspection} without phase results, with the "why". */
export type DashboardInspection = Omit<KeyInspection, 'phaseResults'> & {
  phases: string[];
  failedAttempts: number;
  requestStored: boolean;
  problemType: string | null;
};

/** The `type` member of a stored problem+json body (at most 200 characters), or null. */
export function problemType(body: unknown): string | null {
  if (!(body instanceof Uint8Array)) return null;
  try {
    const type = (JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body)) as { type?: unknown })?.type;
    return typeof type === 'string' ? type.slice(0, 200) : null;
  } catch {
    return null;
  }
}

function toKey(row: Row): DashboardKey {
  const key: DashboardKey = {
    scope: String(row.scope),
    key: String(row.key),
    state: String(row.state ?? 'started'),
    recoveryPoint: row.recovery_point == null ? null : String(row.recovery_point),
    createdAt: dateOrNull(row.created_at) ?? new Date(0),
    failedAttempts: Number(row.failed_attempts ?? 0),
  };
  if ('locked_until' in row) key.lockedUntil = dateOrNull(row.locked_until);
  if ('lock_version' in row) key.token = String(row.lock_version);
  if ('has_request' in row) key.requestStored = row.has_request === true;
  if ('response_status' in row) key.responseStatus = row.response_status == null ? null : Number(row.response_status);
  if ('problem_body' in row) key.problemType = problemType(row.problem_body);
  return key;
}

/** See `PostgresStore.dashboard`. */
export async function dashboard(ctx: StoreContext, retentionMs: number, limit: number): Promise<DashboardData> {
  const q = (text: string, params: unknown[]) => ctx.db.query(text, params).then((r) => r.rows as Row[]);
  const [health, timeline, stuck, failing, oldest, past] = await Promise.all([
    stats(ctx, retentionMs),
    q(ctx.sql.dashboardTimeline, []),
    q(ctx.sql.dashboardStuck, [retentionMs, limit]),
    q(ctx.sql.dashboardFailing, [retentionMs, limit]),
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
    failing: failing.map(toKey),
    oldest: oldest.map(toKey),
    pastRetention: past.map(toKey),
  };
}

/** The dashboard's key inspector: `inspect` with the phase results left out (they may hold business data). */
export async function dashboardInspect(ctx: StoreContext, scope: string, key: string, retentionMs: number): Promise<DashboardInspection | undefined> {
  const [found, why] = await Promise.all([
    inspect(ctx, scope, key, retentionMs),
    ctx.maintenance.query(ctx.sql.dashboardWhy, [scope, key]).then((r) => r.rows[0] as Row | undefined),
  ]);
  if (!found) return undefined;
  const { phaseResults, ...rest } = found;
  return {
    ...rest,
    phases: Object.keys(phaseResults),
    failedAttempts: Number(why?.failed_attempts ?? 0),
    requestStored: why?.has_request === true,
    problemType: problemType(why?.problem_body),
  };
}
