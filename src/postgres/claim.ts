/** The claim (protocol.md K3) and the takeover, on a plain or a partitioned table. */
import { KeyState } from '../core/constants.js';
import { MissingPartitionError } from './errors.js';
import type { ClaimInput, ClaimResult, KeyRef, PhaseResults, TakeOverResult } from '../store/types.js';
import type { StoreContext } from './context.js';
import { readDoneRecord, readRecord } from './responses.js';
import { blobRef, type Row } from './rows.js';
import type { PartitionedStatements } from './sql.js';
import { ReplayShare } from '../store/replay-share.js';

/** The claim's result when this worker won: the token and claim id of the row it wrote. */
function claimed(row: Row): ClaimResult {
  return { kind: 'claimed', token: Number(row.lock_version), claimId: String(row.claim_id) };
}

/**
 * How the plain-table claim starts, learned per store from its own recent claims. Read first
 * (`readDone`, one primary-key read, then `claim` only when that finds no finished key) costs a
 * replay one cheap read and a new key two round trips; claim first (`claim` alone, which reads
 * the row itself) costs a new key one statement, exactly the raw claim, and a replay the
 * claim statement, which on a finished key did about 0.55-0.7 of a bare read (its INSERT is
 * set up on every run, insert or not; bench/notes.md). So the store reads first while at
 * least half of its recent claims were replays, and claims first otherwise (new keys, the
 * common case, and a fresh store). Both paths decide the same way (protocol.md K3): only the
 * number of statements differs.
 *
 * Reading first always was measured against this switch with the lean `readDone`
 * (issue 26): a new request then did 0.62-0.86 of claim first (the miss is a round trip of its
 * own, however few columns a hit returns; bench/notes.md, `--only=claim-path`), so the switch stays.
 *
 * `replayShare` is an exponentially weighted share of replays among the last claims
 * (../store/replay-share.ts, shared with the Redis store's adaptive fast path).
 */
const replayShare = new WeakMap<StoreContext, ReplayShare>();
function observe(ctx: StoreContext, replay: boolean): void {
  let share = replayShare.get(ctx);
  if (!share) {
    share = new ReplayShare();
    replayShare.set(ctx, share);
  }
  share.add(replay);
}

/**
 * A store's claim path pinned (true: read first, false: claim first), for bench/claim-path.ts,
 * which measures one path against the other on the same workload. Not for applications.
 * @internal
 */
const pinned = new WeakMap<StoreContext, boolean>();
/** @internal Pins (or, with undefined, unpins) the claim path of `ctx`'s store; see `pinned`. */
export function pinClaimPath(ctx: StoreContext, readFirst: boolean | undefined): void {
  if (readFirst === undefined) pinned.delete(ctx);
  else pinned.set(ctx, readFirst);
}

/** See `IdempotencyStore.claim`. */
export async function claim(ctx: StoreContext, input: ClaimInput): Promise<ClaimResult> {
  const { db, sql } = ctx;
  // Replay fast path: a finished key within retention is answered by one plain read. A
  // finished row only ever changes by being deleted or replaced past retention, so the
  // answer cannot be stale in a way that matters; every other case claims below. Taken always
  // in partitioned mode (there it saves a transaction) and in Citus mode (its insert-first
  // claim would draw a token and lock the finished row on every replay), on a plain table
  // while replays are frequent (see `replayShare`), never with group commit: the batched claim
  // reads first itself (protocol.md K19).
  const readFirst = !ctx.group && (ctx.psql !== undefined || ctx.citus !== undefined || (pinned.get(ctx) ?? replayShare.get(ctx)?.frequent() === true));
  if (readFirst) {
    // Only a row within retention comes back (sql/claim.ts).
    const done = (await db.query(sql.readDone, [input.scope, input.key, input.retentionMs])).rows[0];
    if (done && done.state === KeyState.Done) {
      if (!ctx.psql) observe(ctx, true);
      return { kind: 'exists', record: await readDoneRecord(ctx, done, input.scope, input.key, input.fingerprint) };
    }
  }
  if (ctx.psql) return claimPartitioned(ctx, ctx.psql, input);
  const result = await claimPlain(ctx, input);
  if (!ctx.group) observe(ctx, result.kind === 'exists' && result.record.state === KeyState.Done);
  return result;
}

/** The claim on a plain table (protocol.md Q1, Q2), after the replay fast path if it was taken. */
async function claimPlain(ctx: StoreContext, input: ClaimInput): Promise<ClaimResult> {
  const { db, sql } = ctx;
  const params = [input.scope, input.key, input.fingerprint, input.leaseMs, input.retentionMs];
  // Bounded: each turn either claims, finds a live row, or loses a race to a writer that
  // made progress (a replacement or a deletion), which cannot repeat without bound.
  for (let attempt = 0; attempt < 5; attempt++) {
    let row = attempt === 0 && ctx.group ? await ctx.group.claim(input) : (await db.query(sql.claim, params)).rows[0];
    if (row?.kind === 'claimed') return claimed(row);
    if (!row) {
      // Lost the race to a concurrent claim committed after our snapshot: read it fresh.
      row = (await db.query(sql.readForUpdate, [input.scope, input.key, input.retentionMs])).rows[0];
      if (!row) continue; // deleted in between (discarded or swept): claim again
    }
    // Past retention the row counts as absent, unless its lease is still valid: its worker
    // is alive, so the row is reported as it is (in progress) instead of being replaced.
    if (row.retention_expired === true && row.lease_expired === true) {
      const won = (await db.query(sql.replaceExpired, [...params, row.lock_version])).rows[0];
      if (won) {
        // The replaced response's blob is dead: delete it now rather than keep a response
        // past retention (best effort: a sweep of the row deletes it too).
        if (row.response_body_ref) await ctx.blobs.delete([blobRef(row, input.scope, input.key)]).catch(() => undefined);
        return claimed(won);
      }
      continue;
    }
    return { kind: 'exists', record: await readRecord(ctx, row, input.scope, input.key, input.fingerprint) };
  }
  throw new Error('idem/postgres: claim did not settle after 5 attempts');
}

/**
 * The claim in partitioned mode: one transaction holding the key's advisory lock, in which
 * the lookup across partitions and the insert (or the replacement of a row past retention)
 * cannot interleave with another claim of the key. See `partitionedStatements` in sql.ts.
 */
async function claimPartitioned(ctx: StoreContext, psql: PartitionedStatements, input: ClaimInput): Promise<ClaimResult> {
  const { db } = ctx;
  const params = [input.scope, input.key, input.fingerprint, input.leaseMs, input.retentionMs];
  try {
    return await db.transaction(async (tx): Promise<ClaimResult> => {
      await db.queryOn(tx, psql.lockKey, [input.scope, input.key]);
      const row = (await db.queryOn(tx, psql.claim, params)).rows[0]!;
      if (row.kind === 'claimed') return claimed(row);
      if (row.retention_expired === true && row.lease_expired === true) {
        const won = (await db.queryOn(tx, psql.replaceExpired, [...params, row.lock_version])).rows[0];
        if (won) return claimed(won);
        // A takeover or heartbeat (not a claim: those wait for the lock) changed the row in
        // between: report it as it is now.
        const now = (await db.queryOn(tx, ctx.sql.read, [input.scope, input.key, input.retentionMs])).rows[0];
        if (now) return { kind: 'exists', record: await readRecord(ctx, now, input.scope, input.key, input.fingerprint) };
        throw new Error('idem/postgres: a key row vanished during its partitioned claim');
      }
      return { kind: 'exists', record: await readRecord(ctx, row, input.scope, input.key, input.fingerprint) };
    });
  } catch (error) {
    if ((error as { code?: string }).code === '23514') {
      throw new MissingPartitionError(
        `idem/postgres: no partition of ${ctx.table} for today (UTC): run store.maintain() or \`idem partitions\` at least daily`,
        {
          cause: error,
        },
      );
    }
    throw error;
  }
}

/** See `IdempotencyStore.takeOver`. */
export async function takeOver(ctx: StoreContext, ref: KeyRef, leaseMs: number): Promise<TakeOverResult> {
  const row = (await ctx.db.query(ctx.sql.takeOver, [ref.scope, ref.key, ref.token, leaseMs])).rows[0];
  if (!row) return { kind: 'lost' };
  return {
    kind: 'taken',
    token: Number(row.lock_version),
    claimId: String(row.claim_id),
    recoveryPoint: String(row.recovery_point),
    phaseResults: (row.phase_results ?? {}) as PhaseResults,
    failedAttempts: Number(row.failed_attempts),
  };
}
