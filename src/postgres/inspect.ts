/** What an operator sees: one key in full (`idem inspect`) and the table's health (`idem stats`). */
import type { PhaseResults } from '../store/types.js';
import type { StoreContext } from './options.js';
import { listPartitions } from './partitions.js';
import { openHeaders } from './responses.js';
import { blobRef, type Row } from './rows.js';
import { dateOrNull } from './values.js';

/** One key as an operator sees it (`PostgresStore.inspect`). */
export interface KeyInspection {
  scope: string;
  key: string;
  state: string;
  /** SHA-256 fingerprint, hex. */
  fingerprint: string;
  recoveryPoint: string;
  phaseResults: PhaseResults;
  /** The fencing token (column `lock_version`), as decimal text. */
  token: string;
  claimId: string;
  lockedUntil: Date | null;
  leaseExpired: boolean;
  leaseRemainingMs: number;
  /**
   * The stored response, summarised: status, replayed headers (opened when sealed and the key
   * is configured; empty when it cannot be opened), body size in bytes as stored (ciphertext
   * when sealed), where the body lives, and the key id it was sealed with (null: plaintext).
   */
  response: {
    status: number;
    headers: Array<[string, string]>;
    bytes: number;
    storage: 'inline' | 'out-of-line';
    keyId: string | null;
  } | null;
  createdAt: Date;
  finishedAt: Date | null;
  retentionExpired: boolean;
  /** The last operator action on the row (protocol.md K40), as its JSON note, or null. */
  operatorNote: string | null;
}

/** Table health; see `PostgresStore.stats`. */
export interface StoreStats {
  total: number;
  started: number;
  done: number;
  oldest: Date | null;
  /** Past retention, lease not valid: the next sweep removes them. */
  expiredUnswept: number;
  /** Started, lease over, within retention: abandoned work the next retry (or a completer) takes over. */
  abandoned: number;
  liveLeases: number;
  /** Partitioned mode: partition names by day. */
  partitions?: Array<{ name: string; day: string; expired: boolean }>;
  /**
   * Streaming standbys of the server (`pg_stat_replication`), when it could be read: with
   * standbys and none synchronous, a failover can lose acknowledged keys and a retried
   * payment then runs again (see docs/reliability.md).
   */
  replication?: {
    standbys: number;
    /** Standbys in `sync` or `quorum` state. */
    synchronous: number;
    /** Standbys whose state this role may not read (needs pg_read_all_stats). */
    unknown: number;
    /** The server's `synchronous_commit` for this session. */
    synchronousCommit: string;
  };
}

/**
 * True when `replication` shows a failover could lose acknowledged keys: streaming standbys
 * and none synchronous, or `synchronous_commit` at `off` / `local` (which does not wait for
 * a standby). Unknown standby states count as synchronous (no false alarm).
 */
export function replicationAtRisk(replication: StoreStats['replication']): boolean {
  if (!replication || replication.standbys === 0) return false;
  if (replication.synchronous + replication.unknown === 0) return true;
  return replication.synchronousCommit === 'off' || replication.synchronousCommit === 'local';
}

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
