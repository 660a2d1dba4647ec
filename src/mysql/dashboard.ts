/**
 * What `idem dashboard` shows of a MySQL key table: the same overview and inspector as on
 * PostgreSQL (`DashboardData`), read-only, bounded lists, no bodies (a small plaintext problem
 * document is read for its `type` only), no credentials, no phase results.
 */
import { type DashboardData, type DashboardInspection, type DashboardKey, problemType } from '../postgres/dashboard.js';
import type { MySqlRow } from './client.js';
import { b, type MySqlContext, us } from './context.js';
import { inspect, stats } from './operator.js';
import { text } from './rows.js';

/** A stored body's problem `type` when its headers say problem+json (the SQL read it only when small, inline, plaintext). */
function problemOf(row: MySqlRow): string | null {
  if (row.problem_body === null || row.problem_body === undefined || row.problem_headers === null || row.problem_headers === undefined) return null;
  try {
    const headers = JSON.parse(text(row.problem_headers)) as unknown;
    const problem =
      Array.isArray(headers) &&
      headers.some((h) => Array.isArray(h) && String(h[0]).toLowerCase() === 'content-type' && /^application\/problem\+json/i.test(String(h[1])));
    return problem ? problemType(row.problem_body) : null;
  } catch {
    return null;
  }
}

function toKey(row: MySqlRow, state?: string): DashboardKey {
  const key: DashboardKey = {
    scope: text(row.scope),
    key: text(row.key),
    state: state ?? String(row.state ?? 'started'),
    recoveryPoint: row.recovery_point == null ? null : String(row.recovery_point),
    createdAt: new Date(Number(row.created_ms ?? 0)),
    failedAttempts: Number(row.failed_attempts ?? 0),
  };
  if ('locked_until_ms' in row) key.lockedUntil = row.locked_until_ms == null ? null : new Date(Number(row.locked_until_ms));
  if ('lock_version' in row) key.token = String(row.lock_version);
  if ('has_request' in row) key.requestStored = Number(row.has_request) === 1;
  if ('response_status' in row) key.responseStatus = row.response_status == null ? null : Number(row.response_status);
  if ('problem_body' in row) key.problemType = problemOf(row);
  return key;
}

/** See `MySqlStore.dashboard`. */
export async function dashboard(ctx: MySqlContext, retentionMs: number, limit: number): Promise<DashboardData> {
  const q = (sql: string, values: unknown[]) => ctx.db.rows(sql, values, false);
  const ret = us(retentionMs);
  const [health, timeline, stuck, failing, oldest, past] = await Promise.all([
    stats(ctx, retentionMs),
    q(ctx.sql.dashboardTimeline, []),
    q(ctx.sql.dashboardStuck, [ret, limit]),
    q(ctx.sql.dashboardFailing, [ret, limit]),
    q(ctx.sql.dashboardOldest, [ret, limit]),
    q(ctx.sql.dashboardPastRetention, [ret, limit]),
  ]);
  return {
    table: ctx.table,
    mode: 'plain',
    retentionMs,
    stats: health,
    timeline: timeline.map((r) => ({ hour: String(r.hour), state: String(r.state), count: Number(r.n) })),
    stuck: stuck.map((r) => toKey(r, 'started')),
    failing: failing.map((r) => toKey(r)),
    oldest: oldest.map((r) => toKey(r)),
    pastRetention: past.map((r) => toKey(r)),
  };
}

/** See `MySqlStore.dashboardInspect`. */
export async function dashboardInspect(ctx: MySqlContext, scope: string, key: string, retentionMs: number): Promise<DashboardInspection | undefined> {
  const [found, why] = await Promise.all([inspect(ctx, scope, key, retentionMs), ctx.db.rows(ctx.sql.dashboardWhy, [b(scope), b(key)], false)]);
  if (!found) return undefined;
  const { phaseResults, ...rest } = found;
  const row = why[0];
  return {
    ...rest,
    phases: Object.keys(phaseResults),
    failedAttempts: Number(row?.failed_attempts ?? 0),
    requestStored: Number(row?.has_request ?? 0) === 1,
    problemType: row ? problemOf(row) : null,
  };
}
