/**
 * The SQLite store's `operator` capability (protocol.md K40-K42): the fenced release and forget,
 * each one UPDATE fenced by the token read and the state it needs, in the write transaction that
 * drew its new token; and the operator's reads, `inspect` and `stats`.
 */
import { randomUUID } from 'node:crypto';
import { KeyState } from '../core/constants.js';
import type { KeyInspection, StoreStats } from '../store/inspection.js';
import type { Fenced, OperatorWrite } from '../store/types.js';
import { drawToken, ms, type SqliteContext, type SqliteRowsContext } from './context.js';
import { leaseExpired, phaseResults, retentionExpired } from './rows.js';

/** Thrown inside the write transaction to roll its drawn token back when the write matched nothing. */
const NOT_AS_READ = Symbol('idem.sqlite.not-as-read');

/** See `IdempotencyStore.operate`. */
export async function operate(ctx: SqliteContext, write: OperatorWrite): Promise<Fenced<{ token: number }>> {
  const { scope, key, token } = write.ref;
  try {
    const next = await ctx.db.transaction(async (run) => {
      const next = await drawToken(ctx, run);
      const rows =
        write.action === 'release'
          ? await run(ctx.sql.operatorRelease, [next, write.note, scope, key, token, write.force === true ? 1 : 0])
          : await run(ctx.sql.operatorForget, [next, randomUUID(), write.note, scope, key, token]);
      if (rows.length !== 1) throw NOT_AS_READ;
      return next;
    });
    return { kind: 'ok', value: { token: next } };
  } catch (error) {
    if (error === NOT_AS_READ) return { kind: 'fenced' };
    throw error;
  }
}

const date = (value: unknown): Date | null => (value === null || value === undefined ? null : new Date(Number(value)));

/** See `SqliteStore.inspect`. */
export async function inspect(ctx: SqliteRowsContext, scope: string, key: string, retentionMs: number): Promise<KeyInspection | undefined> {
  const row = (await ctx.db.rows(ctx.sql.inspect, [ms(retentionMs), scope, key]))[0];
  if (!row) return undefined;
  const done = row.state === KeyState.Done && row.response_status !== null;
  let headers: Array<[string, string]> = [];
  if (done && row.response_key_id === null) headers = JSON.parse(String(row.response_headers ?? '[]')) as Array<[string, string]>;
  return {
    scope,
    key,
    state: String(row.state),
    fingerprint: String(row.fingerprint),
    recoveryPoint: String(row.recovery_point),
    phaseResults: phaseResults(row.phase_results),
    token: String(row.lock_version),
    claimId: String(row.claim_id),
    lockedUntil: date(row.locked_until),
    leaseExpired: leaseExpired(row),
    leaseRemainingMs: Number(row.lease_remaining_ms ?? 0),
    operatorNote: row.operator_note === null || row.operator_note === undefined ? null : String(row.operator_note),
    response: done
      ? {
          status: Number(row.response_status),
          headers,
          bytes: Number(row.response_bytes ?? 0),
          storage: 'inline',
          keyId: row.response_key_id === null ? null : String(row.response_key_id),
        }
      : null,
    createdAt: new Date(Number(row.created_at)),
    finishedAt: date(row.finished_at),
    retentionExpired: retentionExpired(row),
  };
}

/** See `SqliteStore.stats`. */
export async function stats(ctx: SqliteRowsContext, retentionMs: number): Promise<StoreStats> {
  const row = (await ctx.db.rows(ctx.sql.stats, [ms(retentionMs), ms(retentionMs)]))[0]!;
  return {
    total: Number(row.total),
    started: Number(row.started),
    done: Number(row.done),
    oldest: date(row.oldest),
    expiredUnswept: Number(row.expired_unswept),
    abandoned: Number(row.abandoned),
    liveLeases: Number(row.live_leases),
  };
}
