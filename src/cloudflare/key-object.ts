/**
 * What one key's Durable Object does (the object class is object.ts): claim, takeover, and
 * every write after the claim fenced by the token, each one step of the object's transactional
 * storage (cells.ts). The object is the key's single writer, so a compare-and-set is a read and
 * a write in one transaction, and the lease clock is the object's own `Date.now()`: one clock,
 * the only writer's (protocol.md K7, "Words": the store's clock).
 *
 * Tokens: `max(last + 1, Date.now())`. The last token is kept when the row is deleted (a
 * discard), so tokens only grow (protocol.md K8); the retention alarm deletes everything only
 * once the clock has passed the last token, so a token drawn after that is still higher.
 */
import { KeyState, RECOVERY_POINT_FINISHED, RECOVERY_POINT_START } from '../core/constants.js';
import { asJson, copyBytes, sameBytes } from '../memory/entry.js';
import type { ClaimInput, Fenced, OperatorWrite } from '../store/types.js';
import { type Cell, type CellState, type KeyRow, openCell } from './cells.js';
import type { WireClaim, WireCommit, WireRecord, WireTakeOver } from './wire.js';
import type { DurableObjectStorageLike } from './workers-types.js';

const FENCED = { kind: 'fenced' } as const;
const leaseOver = (row: KeyRow, now: number) => row.lockedUntil === null || row.lockedUntil <= now;
/** Created at or before `now - retentionMs` (protocol.md K6), as the database stores judge it. */
const retentionOver = (row: KeyRow, retentionMs: number, now: number) => row.createdAt <= now - retentionMs;
function nextToken(state: CellState, now: number): number {
  state.lastToken = Math.max(state.lastToken + 1, now);
  return state.lastToken;
}

/** The key's logic inside its object; `storage` is the object's `ctx.storage`. */
export class KeyObject {
  private readonly cell: Cell;

  constructor(
    private readonly storage: DurableObjectStorageLike,
    private readonly clock: () => number = Date.now,
  ) {
    this.cell = openCell(storage);
  }

  /** protocol.md K3, Q1: a fresh row, or the existing one; a row past retention with its lease over counts as absent (K6). */
  async claim(input: ClaimInput): Promise<WireClaim> {
    const now = this.clock();
    const outcome = await this.cell.update<WireClaim>((state) => {
      const row = state.row;
      if (row && !(retentionOver(row, input.retentionMs, now) && leaseOver(row, now))) {
        return { result: { kind: 'exists', record: toRecord(row, now, input.retentionMs, input.fingerprint) }, write: false };
      }
      state.row = {
        scope: input.scope,
        key: input.key,
        fingerprint: copyBytes(input.fingerprint),
        state: KeyState.Started,
        recoveryPoint: RECOVERY_POINT_START,
        phaseResults: {},
        token: nextToken(state, now),
        claimId: crypto.randomUUID(),
        lockedUntil: now + input.leaseMs,
        createdAt: now,
        finishedAt: null,
        failedAttempts: 0,
        retentionMs: input.retentionMs,
      };
      return { result: { kind: 'claimed', token: state.row.token, claimId: state.row.claimId, retentionRemainingMs: input.retentionMs }, write: true };
    });
    if (outcome.kind === 'claimed') await this.storage.setAlarm(now + input.retentionMs);
    return outcome;
  }

  /** protocol.md K9, Q3: a compare-and-set on the token, the key started and its lease not valid; an unreleased lease counts a crash (K23). */
  takeOver(token: number, leaseMs: number): Promise<WireTakeOver> {
    const now = this.clock();
    return this.cell.update<WireTakeOver>((state) => {
      const row = state.row;
      if (!row || row.token !== token || row.state !== KeyState.Started || !leaseOver(row, now)) return { result: { kind: 'lost' }, write: false };
      row.token = nextToken(state, now);
      row.lockedUntil = now + leaseMs;
      if (!row.released) row.failedAttempts = (row.failedAttempts ?? 0) + 1;
      row.released = false;
      const { claimId, recoveryPoint, phaseResults } = row;
      return { result: { kind: 'taken', token: row.token, claimId, recoveryPoint, phaseResults, failedAttempts: row.failedAttempts ?? 0 }, write: true };
    });
  }

  /** protocol.md K4-K5, Q4-Q5: the recovery point and result, or the response, fenced by the token. */
  commit(token: number, record: WireCommit): Promise<Fenced> {
    const now = this.clock();
    return this.fenced(token, (row) => {
      if (record.kind === 'phase') {
        row.recoveryPoint = record.phase;
        row.phaseResults = { ...row.phaseResults, [record.phase]: asJson(record.result) };
        row.lockedUntil = now + record.leaseMs;
      } else {
        row.state = KeyState.Done;
        row.recoveryPoint = RECOVERY_POINT_FINISHED;
        row.response = { status: record.response.status, headers: record.response.headers, body: copyBytes(record.response.body) };
        row.lockedUntil = null;
        row.finishedAt = now;
      }
      return undefined;
    });
  }

  /** The heartbeat (protocol.md K7). */
  extendLease(token: number, leaseMs: number): Promise<Fenced> {
    const now = this.clock();
    return this.fenced(token, (row) => {
      row.lockedUntil = now + leaseMs;
    });
  }

  /** protocol.md K10: the lease ends now, the recovery point stays; the next takeover counts no crash (K23). */
  release(token: number): Promise<Fenced<'released'>> {
    const now = this.clock();
    return this.fenced(token, (row) => {
      row.lockedUntil = now;
      row.released = true;
      return 'released' as const;
    });
  }

  /** protocol.md K10: deleted while no phase committed, else released; the last token stays (K8). */
  discard(token: number): Promise<Fenced<'deleted' | 'released'>> {
    const now = this.clock();
    return this.cell.update<Fenced<'deleted' | 'released'>>((state) => {
      const row = state.row;
      if (!row || row.token !== token || row.state !== KeyState.Started) return { result: FENCED, write: false };
      if (row.recoveryPoint === RECOVERY_POINT_START) {
        state.row = undefined;
        return { result: { kind: 'ok', value: 'deleted' as const }, write: true };
      }
      row.lockedUntil = now;
      row.released = true;
      return { result: { kind: 'ok', value: 'released' as const }, write: true };
    });
  }

  /** A thrown attempt, counted while the lease is held (protocol.md K23, K46 2). */
  countFailure(token: number): Promise<Fenced<number>> {
    return this.fenced(token, (row) => (row.failedAttempts = (row.failedAttempts ?? 0) + 1));
  }

  /** The record, or `undefined` when absent or past retention (protocol.md K6). */
  get(retentionMs: number): Promise<WireRecord | undefined> {
    const now = this.clock();
    return this.cell.update((state) => {
      const row = state.row;
      if (!row || retentionOver(row, retentionMs, now)) return { result: undefined, write: false };
      const record = toRecord(row, now, retentionMs);
      if (row.operatorNote) record.operatorNote = row.operatorNote;
      return { result: record, write: false };
    });
  }

  /** protocol.md K40-K42: an operator's release or forget, fenced by the token read and the state it needs. */
  operate(write: OperatorWrite): Promise<Fenced<{ token: number }>> {
    const now = this.clock();
    return this.cell.update<Fenced<{ token: number }>>((state) => {
      const row = state.row;
      if (!row || row.token !== write.ref.token) return { result: FENCED, write: false };
      if (write.action === 'release') {
        if (row.state !== KeyState.Started || (!write.force && !leaseOver(row, now))) return { result: FENCED, write: false };
      } else {
        if (row.state !== KeyState.Done) return { result: FENCED, write: false };
        row.state = KeyState.Started;
        row.recoveryPoint = RECOVERY_POINT_START;
        row.phaseResults = {};
        row.claimId = crypto.randomUUID();
        row.finishedAt = null;
        row.failedAttempts = 0;
        delete row.response;
        delete row.request;
      }
      row.lockedUntil = now;
      row.released = true;
      row.token = nextToken(state, now);
      row.operatorNote = write.note;
      return { result: { kind: 'ok', value: { token: row.token } }, write: true };
    });
  }

  /**
   * The retention alarm (protocol.md K6): a row past its claim's retention whose lease is over
   * is deleted, with the last token too once the clock has passed it (a later claim's token,
   * drawn from the clock, is still higher). Otherwise the alarm is set again for when it can be.
   */
  async alarm(): Promise<void> {
    const now = this.clock();
    const next = await this.cell.update<number | undefined>((state) => {
      const row = state.row;
      if (row && !(retentionOver(row, row.retentionMs, now) && leaseOver(row, now))) {
        return { result: Math.max(row.createdAt + row.retentionMs, row.lockedUntil ?? 0) + 1, write: false };
      }
      state.row = undefined;
      // Past the last token, the token goes too (the object then stores nothing); else it stays until then.
      if (state.lastToken < now) {
        state.lastToken = 0;
        return { result: undefined, write: true };
      }
      return { result: state.lastToken + 1, write: true };
    });
    if (next !== undefined) await this.storage.setAlarm(next);
  }

  /** A write on the row `token` holds while it is started; else nothing changes (protocol.md K8). */
  private fenced<T>(token: number, write: (row: KeyRow) => T): Promise<Fenced<T>> {
    return this.cell.update<Fenced<T>>((state) => {
      const row = state.row;
      if (!row || row.token !== token || row.state !== KeyState.Started) return { result: FENCED, write: false };
      return { result: { kind: 'ok', value: write(row) }, write: true };
    });
  }
}

/** The row as a record at `now`; a mismatching `fingerprint` leaves the response out (protocol.md K3). */
function toRecord(row: KeyRow, now: number, retentionMs: number, fingerprint?: Uint8Array): WireRecord {
  const leaseExpired = leaseOver(row, now);
  const record: WireRecord = {
    scope: row.scope,
    key: row.key,
    state: row.state,
    fingerprint: row.fingerprint,
    recoveryPoint: row.recoveryPoint,
    phaseResults: row.phaseResults,
    token: row.token,
    claimId: row.claimId,
    leaseExpired,
    leaseRemainingMs: leaseExpired ? 0 : row.lockedUntil! - now,
    createdAt: row.createdAt,
    retentionRemainingMs: row.createdAt + retentionMs - now,
  };
  if (row.response && !(fingerprint && !sameBytes(fingerprint, row.fingerprint))) record.response = row.response;
  return record;
}
