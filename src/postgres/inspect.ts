/** What an operator sees on PostgreSQL: one key in full (`idem inspect`) and the table's health (`idem stats`). */
import type { KeyInspection, StoreStats } from '../store/inspection.js';
import { openHeaders } from '../store/stored-form.js';
import type { PhaseResults } from '../store/types.js';
import type { StoreContext } from './context.js';
import { listPartitions } from './partitions.js';
import { blobRef, type Row } from './rows.js';
import { dateOrNull } from './values.js';

/** See `PostgresStore.inspect`. */
export async function inspect(ctx: StoreContext, scope: string, key: string, retentionMs: number): Promise<KeyInspection | undefined> {
  const row = (await ctx.maintenance.query(ctx.sql.inspect, [scope, key, retentionMs])).rows[0];
  if (!row) return undefined;
  return {
    scope: String(row.scope),
    key: String(row.key),
    state: String(row.state),
    fingerprint: String(row.fingerprint),
    recoveryPoint: String(row.recovery_point),
    phaseResults: (row.phase_results ?? {}) as PhaseResults,
    token: String(row.lock_version),
    claimId: String(row.claim_id),
    lockedUntil: dateOrNull(row.locked_until),
    leaseExpired: row.lease_expired === true,
    leaseRemainingMs: Number(row.lease_remaining_ms ?? 0),
    response: row.response_status === null || row.response_status === undefined ? null : await inspectResponse(ctx, row, scope, key),
    createdAt: dateOrNull(row.created_at)!,
    finishedAt: dateOrNull(row.finished_at),
    retentionExpired: row.retention_expired === true,
    operatorNote: typeof row.operator_note === 'string' ? row.operator_note : null,
  };
}

/** The response summary of {@link inspect}: never the body, and never an error for a row it cannot open. */
async function inspectResponse(ctx: StoreContext, row: Row, scope: string, key: string): Promise<NonNullable<KeyInspection['response']>> {
  const keyId = row.response_key_id === null || row.response_key_id === undefined ? null : String(row.response_key_id);
  const outOfLine = row.response_body_ref !== null && row.response_body_ref !== undefined;
  let headers: Array<[string, string]> = [];
  if (keyId === null) headers = (row.response_headers ?? []) as Array<[string, string]>;
  else if (ctx.cipher && typeof row.response_headers === 'string') {
    try {
      headers = openHeaders(ctx.cipher, row.response_headers, scope, key);
    } catch {
      headers = [];
    }
  }
  let bytes = Number(row.response_bytes ?? 0);
  if (outOfLine) bytes = (await ctx.blobs.get(blobRef(row, scope, key)).catch(() => undefined))?.length ?? 0;
  return { status: Number(row.response_status), headers, bytes, storage: outOfLine ? 'out-of-line' : 'inline', keyId };
}

/** See `PostgresStore.stats`. */
export async function stats(ctx: StoreContext, retentionMs: number): Promise<StoreStats> {
  const row = (await ctx.maintenance.query(ctx.sql.stats, [retentionMs])).rows[0]!;
  const result: StoreStats = {
    total: Number(row.total),
    started: Number(row.started),
    done: Number(row.done),
    oldest: row.oldest === null || row.oldest === undefined ? null : new Date(row.oldest as string | Date),
    expiredUnswept: Number(row.expired_unswept),
    abandoned: Number(row.abandoned),
    liveLeases: Number(row.live_leases),
  };
  if (ctx.psql) result.partitions = await listPartitions(ctx, retentionMs);
  try {
    const r = (await ctx.maintenance.query(ctx.sql.replication)).rows[0];
    if (r) {
      result.replication = {
        standbys: Number(r.standbys),
        synchronous: Number(r.synchronous),
        unknown: Number(r.unknown),
        synchronousCommit: String(r.synchronous_commit),
      };
    }
  } catch {
    // A server without pg_stat_replication (an embedded one): nothing to report.
  }
  return result;
}
