/**
 * An in-memory {@link IdempotencyStore}: one `Map` of key records in this process. It keeps
 * the whole store contract (claim, takeover with a higher token, every write fenced, release
 * and discard, retention counts as absent, sweep, completer) so it can stand in for a real
 * store in unit tests and in a fast test tier, with a clock the test moves.
 *
 * It deduplicates within ONE process only: two processes (or two app hosts) each with their
 * own MemoryStore never see each other's keys, so a retry that lands on another process runs
 * the work again. Use a shared store (`idem/postgres`) in production.
 */
import { randomUUID } from 'node:crypto';
import { KeyState, RECOVERY_POINT_FINISHED, RECOVERY_POINT_START, DEFAULT_RETENTION_MS } from '../core/constants.js';
import { InvalidOptionError } from '../core/errors.js';
import { IN_PROCESS, KeyChangeHub, keyId } from '../store/key-changes.js';
import { asJson, copyBytes, copyRequest, copyResponse, defaultClock, type Entry, idOf, sameBytes } from './entry.js';
import type { MemorySweepOptions, MemoryStoreOptions, MemoryTx } from './options.js';
import type {
  AbandonedKey,
  ClaimInput,
  ClaimResult,
  CommitRecord,
  Fenced,
  IdempotencyStore,
  KeyChanges,
  KeyRecord,
  KeyRef,
  OperatorWrite,
  PhaseResults,
  RequestSnapshot,
  StoreCapabilities,
  TakeOverResult,
} from '../store/types.js';

export type { MemoryStoreOptions, MemorySweepOptions, MemoryTx } from './options.js';

/**
 * The in-memory store. Deduplicates within one process only: for unit tests and a fast test
 * tier, never for a service with more than one process.
 *
 * Tokens come from one counter for the whole store, so a key's tokens only grow, across
 * takeovers, discards and the replacement of a key past retention alike.
 *
 * @example
 * ```ts
 * import { IdempotencyEngine } from 'idem';
 * import { MemoryStore } from 'idem/memory';
 * let now = Date.now();
 * const store = new MemoryStore({ clock: () => now });
 * const engine = new IdempotencyEngine({ store });
 * now += 61_000; // every 60 s lease is over
 * ```
 */
export class MemoryStore implements IdempotencyStore<MemoryTx> {
  private readonly entries = new Map<string, Entry>();
  private readonly clock: () => number;
  private lastToken = 0;
  private readonly hub = new KeyChangeHub(IN_PROCESS);
  /** Beyond the core (protocol.md "Store capabilities"): completer, wait mode in process, operator writes; no table to migrate. */
  readonly capabilities: StoreCapabilities = { completion: true, notify: true, operator: true };

  /** @throws {InvalidOptionError} when `clock` is not a function */
  constructor(options: MemoryStoreOptions = {}) {
    if (options.clock !== undefined && typeof options.clock !== 'function') {
      throw new InvalidOptionError('MemoryStore: clock must be a function returning epoch milliseconds');
    }
    this.clock = options.clock ?? defaultClock;
  }

  async claim(input: ClaimInput): Promise<ClaimResult> {
    const now = this.clock();
    const id = idOf(input.scope, input.key);
    const existing = this.entries.get(id);
    // Past retention the key counts as absent (protocol.md K6), unless its lease is still
    // valid: its worker is alive, so it is reported as it is (in progress) instead.
    if (existing && !(this.retentionOver(existing, input.retentionMs, now) && this.leaseOver(existing, now))) {
      return { kind: 'exists', record: this.toRecord(existing, now, input.fingerprint, input.retentionMs) };
    }
    const entry: Entry = {
      scope: input.scope,
      key: input.key,
      fingerprint: copyBytes(input.fingerprint),
      state: KeyState.Started,
      recoveryPoint: RECOVERY_POINT_START,
      phaseResults: {},
      token: this.nextToken(),
      claimId: randomUUID(),
      lockedUntil: now + input.leaseMs,
      createdAt: now,
      finishedAt: null,
    };
    this.entries.set(id, entry);
    // Only the default clock is real time: an injected one moves as its test says, so the
    // replay cache (protocol.md K20) cannot bound an entry by it and caches nothing.
    if (this.clock === defaultClock) return { kind: 'claimed', token: entry.token, claimId: entry.claimId, retentionRemainingMs: input.retentionMs };
    return { kind: 'claimed', token: entry.token, claimId: entry.claimId };
  }

  async takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult> {
    const now = this.clock();
    const entry = this.entries.get(idOf(ref.scope, ref.key));
    if (!entry || entry.token !== ref.token || entry.state !== KeyState.Started || !this.leaseOver(entry, now)) {
      return { kind: 'lost' };
    }
    entry.token = this.nextToken();
    entry.lockedUntil = now + leaseMs;
    // protocol.md K23: a lease that ran out unreleased was a crashed attempt; it counts.
    if (!entry.released) entry.failedAttempts = (entry.failedAttempts ?? 0) + 1;
    entry.released = false;
    this.changed(entry);
    return {
      kind: 'taken',
      token: entry.token,
      claimId: entry.claimId,
      recoveryPoint: entry.recoveryPoint,
      phaseResults: asJson(entry.phaseResults) as PhaseResults,
      failedAttempts: entry.failedAttempts ?? 0,
    };
  }

  /**
   * Runs `effects` at once (nothing is buffered), then applies `record(value)` only if the
   * token is still current and the key still started. Otherwise the result is `fenced` and
   * the undos the effects registered with {@link MemoryTx.onRollback} run; they run too when
   * the effects or the record throw, and the error propagates.
   */
  commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects: (tx: MemoryTx) => Promise<T>): Promise<Fenced<T>>;
  commit(ref: KeyRef, record: (value: undefined) => CommitRecord): Promise<Fenced<undefined>>;
  async commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects?: (tx: MemoryTx) => Promise<T>): Promise<Fenced<T>> {
    const undos: Array<() => void | Promise<void>> = [];
    const rollback = async () => {
      for (const undo of undos.reverse())
        await Promise.resolve()
          .then(undo)
          .catch(() => undefined);
    };
    let value: T;
    let rec: CommitRecord;
    try {
      value = effects ? await effects({ onRollback: (undo) => void undos.push(undo) }) : (undefined as T);
      rec = record(value);
    } catch (error) {
      await rollback();
      throw error;
    }
    // From here to the write nothing awaits: the check and the write are one step.
    const now = this.clock();
    const entry = this.current(ref);
    if (!entry) {
      await rollback();
      return { kind: 'fenced' };
    }
    if (rec.kind === 'phase') {
      entry.recoveryPoint = rec.phase;
      entry.phaseResults = { ...entry.phaseResults, [rec.phase]: asJson(rec.result) };
      entry.lockedUntil = now + rec.leaseMs;
    } else {
      entry.state = KeyState.Done;
      entry.recoveryPoint = RECOVERY_POINT_FINISHED;
      entry.response = copyResponse(rec.response);
      entry.lockedUntil = null;
      entry.finishedAt = now;
      this.changed(entry);
    }
    return { kind: 'ok', value };
  }

  async extendLease(ref: KeyRef, leaseMs: number): Promise<Fenced> {
    const entry = this.current(ref);
    if (!entry) return { kind: 'fenced' };
    entry.lockedUntil = this.clock() + leaseMs;
    return { kind: 'ok', value: undefined };
  }

  async countFailure(ref: KeyRef): Promise<Fenced<number>> {
    const entry = this.current(ref);
    if (!entry) return { kind: 'fenced' };
    // A thrown attempt, counted while the lease is held (protocol.md K23); takeOver counts crashes.
    entry.failedAttempts = (entry.failedAttempts ?? 0) + 1;
    return { kind: 'ok', value: entry.failedAttempts };
  }

  async release(ref: KeyRef): Promise<Fenced<'released'>> {
    const entry = this.current(ref);
    if (!entry) return { kind: 'fenced' };
    // The lease ends now: a retry takes over at once, the completer waits its grace (protocol.md K10).
    entry.lockedUntil = this.clock();
    entry.released = true;
    this.changed(entry);
    return { kind: 'ok', value: 'released' };
  }

  async discard(ref: KeyRef): Promise<Fenced<'released' | 'deleted'>> {
    const entry = this.current(ref);
    if (!entry) return { kind: 'fenced' };
    // A key with a committed phase is never deleted (its effects exist): it is released.
    if (entry.recoveryPoint === RECOVERY_POINT_START) {
      this.entries.delete(idOf(ref.scope, ref.key));
      this.changed(entry);
      return { kind: 'ok', value: 'deleted' };
    }
    entry.lockedUntil = this.clock();
    entry.released = true;
    this.changed(entry);
    return { kind: 'ok', value: 'released' };
  }

  async get(scope: string, key: string, retentionMs: number): Promise<KeyRecord | undefined> {
    const now = this.clock();
    const entry = this.entries.get(idOf(scope, key));
    if (!entry || this.retentionOver(entry, retentionMs, now)) return undefined;
    const record = this.toRecord(entry, now, undefined, retentionMs);
    if (entry.operatorNote) record.operatorNote = entry.operatorNote;
    return record;
  }

  async operate(write: OperatorWrite): Promise<Fenced<{ token: number }>> {
    const now = this.clock();
    const entry = this.entries.get(idOf(write.ref.scope, write.ref.key));
    if (!entry || entry.token !== write.ref.token) return { kind: 'fenced' };
    if (write.action === 'release') {
      // protocol.md K41: a valid lease only with force; the holder is fenced by the new token.
      if (entry.state !== KeyState.Started || (!write.force && !this.leaseOver(entry, now))) return { kind: 'fenced' };
    } else {
      // protocol.md K42: a finished key becomes a released claim at `start` with nothing stored.
      if (entry.state !== KeyState.Done) return { kind: 'fenced' };
      entry.state = KeyState.Started;
      entry.recoveryPoint = RECOVERY_POINT_START;
      entry.phaseResults = {};
      entry.claimId = randomUUID();
      entry.finishedAt = null;
      entry.failedAttempts = 0;
      delete entry.response;
      delete entry.request;
    }
    entry.lockedUntil = now;
    entry.released = true;
    entry.token = this.nextToken();
    entry.operatorNote = write.note;
    // protocol.md K40: a released or forgotten key wakes its waiters like any other change.
    this.changed(entry);
    return { kind: 'ok', value: { token: entry.token } };
  }

  async saveRequest(ref: KeyRef, request: RequestSnapshot): Promise<Fenced> {
    const entry = this.current(ref);
    if (!entry) return { kind: 'fenced' };
    entry.request = copyRequest(request);
    return { kind: 'ok', value: undefined };
  }

  async discardAbandoned(ref: KeyRef): Promise<Fenced> {
    const entry = this.current(ref);
    const now = this.clock();
    if (!entry || entry.state !== KeyState.Started || entry.recoveryPoint !== RECOVERY_POINT_START || entry.request) return { kind: 'fenced' };
    if (entry.lockedUntil !== null && entry.lockedUntil > now) return { kind: 'fenced' };
    this.entries.delete(idOf(ref.scope, ref.key));
    return { kind: 'ok', value: undefined };
  }

  async listAbandoned(options: { limit: number; graceMs: number; retentionMs: number }): Promise<AbandonedKey[]> {
    const now = this.clock();
    const graceMs = Math.max(0, Math.floor(options.graceMs));
    const found = [...this.entries.values()].filter(
      (e) => e.state === KeyState.Started && (e.lockedUntil === null || e.lockedUntil <= now - graceMs) && !this.retentionOver(e, options.retentionMs, now),
    );
    // Oldest lease end first.
    found.sort((a, b) => (a.lockedUntil ?? -Infinity) - (b.lockedUntil ?? -Infinity));
    return found.slice(0, Math.max(0, options.limit)).map((e) => {
      const abandoned: AbandonedKey = { record: this.toRecord(e, now) };
      if (e.request) abandoned.request = copyRequest(e.request);
      return abandoned;
    });
  }

  /**
   * Deletes keys past retention (protocol.md K6) whose lease is not valid: a key whose worker
   * still holds a valid lease stays, so a retry cannot run its work a second time.
   *
   * @returns the number of keys deleted
   * @throws {InvalidOptionError} for a batch size below 1
   */
  async sweep(options: MemorySweepOptions = {}): Promise<number> {
    const retentionMs = options.retentionMs ?? DEFAULT_RETENTION_MS;
    const batchSize = options.batchSize ?? 1000;
    if (!(Number.isInteger(batchSize) && batchSize >= 1)) throw new InvalidOptionError('sweep: batchSize must be an integer >= 1');
    const now = this.clock();
    let deleted = 0;
    for (const [id, entry] of this.entries) {
      if (this.retentionOver(entry, retentionMs, now) && this.leaseOver(entry, now)) {
        this.entries.delete(id);
        deleted++;
      }
    }
    return deleted;
  }

  /**
   * Wait mode (protocol.md K17): a subscription to one key's finish, release, discard and
   * takeover in this store, woken in process as each one happens.
   */
  subscribe(scope: string, key: string): Promise<KeyChanges> {
    return this.hub.subscribe(scope, key);
  }

  /** Wakes the waiters of `entry`'s key (one map lookup when nobody waits). */
  private changed(entry: Entry): void {
    if (this.hub.active) this.hub.changed(keyId(entry.scope, entry.key));
  }

  /** The number of keys held, past retention or not. */
  get size(): number {
    return this.entries.size;
  }

  /** The entry `ref` names if its token is current and the key is still started; else `undefined` (fenced). */
  private current(ref: KeyRef): Entry | undefined {
    const entry = this.entries.get(idOf(ref.scope, ref.key));
    return entry && entry.token === ref.token && entry.state === KeyState.Started ? entry : undefined;
  }

  private nextToken(): number {
    return ++this.lastToken;
  }

  private leaseOver(entry: Entry, now: number): boolean {
    return entry.lockedUntil === null || entry.lockedUntil <= now;
  }

  /** Created at or before `now - retentionMs`, as the database stores judge it. */
  private retentionOver(entry: Entry, retentionMs: number, now: number): boolean {
    return entry.createdAt <= now - retentionMs;
  }

  /**
   * A copy of `entry` as a record; a mismatching `requestFingerprint` leaves the response out.
   * With `retentionMs` and the default (real-time) clock, the retention left (protocol.md K20).
   */
  private toRecord(entry: Entry, now: number, requestFingerprint?: Uint8Array, retentionMs?: number): KeyRecord {
    const leaseExpired = this.leaseOver(entry, now);
    const record: KeyRecord = {
      scope: entry.scope,
      key: entry.key,
      state: entry.state,
      fingerprint: copyBytes(entry.fingerprint),
      recoveryPoint: entry.recoveryPoint,
      phaseResults: asJson(entry.phaseResults) as PhaseResults,
      token: entry.token,
      claimId: entry.claimId,
      leaseExpired,
      leaseRemainingMs: leaseExpired ? 0 : entry.lockedUntil! - now,
      createdAt: new Date(entry.createdAt),
    };
    const mismatch = requestFingerprint !== undefined && !sameBytes(requestFingerprint, entry.fingerprint);
    if (entry.response && !mismatch) record.response = copyResponse(entry.response);
    if (retentionMs !== undefined && this.clock === defaultClock) record.retentionRemainingMs = entry.createdAt + retentionMs - now;
    return record;
  }
}
