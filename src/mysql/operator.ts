/**
 * The MySQL store's `operator` capability (protocol.md K40-K42): the fenced release and forget,
 * each one UPDATE fenced by the token read and the state it needs, under a token drawn first
 * (no RETURNING); and the operator's reads, `inspect` and `stats`.
 */
import { randomUUID } from 'node:crypto';
import { KeyState } from '../core/constants.js';
import type { KeyInspection, StoreStats } from '../store/inspection.js';
import type { Fenced, OperatorWrite } from '../store/types.js';
import { rowsMatched } from './client.js';
import { b, drawToken, type MySqlContext, us } from './context.js';
import { leaseExpired, phaseResults, retentionExpired, text } from './rows.js';

/** See `IdempotencyStore.operate`. */
export async function operate(ctx: MySqlContext, write: OperatorWrite): Promise<Fenced<{ token: number }>> {
  const scope = b(write.ref.scope);
  const key = b(write.ref.key);
  const { token } = write.ref;
  if (write.action === 'release') {
    const next = await drawToken(ctx);
    const header = await ctx.db.write(ctx.sql.operatorRelease, [next, write.note, scope, key, token, write.force === true ? 1 : 0]);
    return rowsMatched(header) === 1 ? { kind: 'ok', value: { token: next } } : { kind: 'fenced' };
  }
  const old = (await ctx.db.rows(ctx.sql.operatorBlob, [scope, key, token]))[0];
  if (!old) return { kind: 'fenced' };
  const next = await drawToken(ctx);
  const header = await ctx.db.write(ctx.sql.operatorForget, [next, randomUUID(), write.note, scope, key, token]);
  if (rowsMatched(header) !== 1) return { kind: 'fenced' };
  // The forgotten response's blob is dead (protocol.md K14), as after a replacement past retention.
  if (old.response_body_ref) await ctx.db.write(ctx.sql.blobDelete, [scope, key, String(old.response_body_ref)]).catch(() => undefined);
  return { kind: 'ok', value: { token: next } };
}

/** See `MySqlStore.inspect`. */
export async function inspect(ctx: MySqlContext, scope: string, key: string, retentionMs: number): Promise<KeyInspection | undefined> {
  const row = (await ctx.db.rows(ctx.sql.inspect, [us(retentionMs), b(scope), b(key)], false))[0];
  if (!row) return undefined;
  const done = row.state === KeyState.Done && row.response_status !== null;
  let headers: Array<[string, string]> = [];
  if (done && row.response_key_id === null) headers = JSON.parse(text(row.response_headers ?? '[]')) as Array<[string, string]>;
  const date = (ms: unknown) => (ms === null || ms === undefined ? null : new Date(Number(ms)));
  return {
    scope,
    key,
    state: String(row.state),
    fingerprint: String(row.fingerprint).toLowerCase(),
    recoveryPoint: String(row.recovery_point),
    phaseResults: phaseResults(row.phase_results),
    token: String(row.lock_version),
    claimId: String(row.claim_id),
    lockedUntil: date(row.locked_until_ms),
    leaseExpired: leaseExpired(row),
    leaseRemainingMs: Number(row.lease_remaining_ms ?? 0),
    operatorNote: row.operator_note === null || row.operator_note === undefined ? null : text(row.operator_note),
    response: done
      ? {
          status: Number(row.response_status),
          headers,
          bytes: Number(row.response_bytes ?? 0),
          storage: row.response_body_ref === null ? 'inline' : 'out-of-line',
          keyId: row.response_key_id === null ? null : String(row.response_key_id),
        }
      : null,
    createdAt: new Date(Number(row.created_ms)),
    finishedAt: date(row.finished_ms),
    retentionExpired: retentionExpired(row),
  };
}

/** See `MySqlStore.stats`. */
export async function stats(ctx: MySqlContext, retentionMs: number): Promise<StoreStats> {
  const row = (await ctx.db.rows(ctx.sql.stats, [us(retentionMs), us(retentionMs)], false))[0]!;
  return {
    total: Number(row.total),
    started: Number(row.started),
    done: Number(row.done),
    oldest: row.oldest_ms === null ? null : new Date(Number(row.oldest_ms)),
    expiredUnswept: Number(row.expired_unswept),
    abandoned: Number(row.abandoned),
    liveLeases: Number(row.live_leases),
  };
}
