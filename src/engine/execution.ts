import { RECOVERY_POINT_START } from '../core/constants.js';
import { deriveKey } from '../core/derived-key.js';
import { ExecutionClosedError, InvalidOptionError, LeaseLostError } from '../core/errors.js';
import { hasCompletion } from '../store/capabilities.js';
import type { IdempotencyStore, KeyRef, PhaseResults, RequestSnapshot, StoredResponse } from '../store/types.js';
import { checkPhaseName, checkResponse, toJson } from './execution-checks.js';
import { type IdempotencyEvent, notify } from './execution-events.js';

export { type IdempotencyEvent, notify } from './execution-events.js';

/** Settings an execution needs from its engine. */
export interface ExecutionSettings {
  leaseMs: number;
  /** Heartbeat period in ms, or 0 for none. */
  heartbeatMs: number;
  /** The heartbeat stops extending the lease after this many ms, so a hung worker cannot hold a key forever. */
  maxExecutionMs: number;
  onEvent?: ((event: IdempotencyEvent) => void) | undefined;
  /** This execution's takeover: the attempts failed so far, as the store counted them (protocol.md K23); undefined for a claim. */
  failedAttempts?: number | undefined;
  /** When the key's retention ends, where the engine knows it ({@link Execution.retentionEndsAt}). */
  retentionEndsAt?: Date | undefined;
  /** Called with the stored response once the finish committed (the replay cache, protocol.md K20). Must not throw. */
  onFinished?: ((response: StoredResponse, phaseResults: PhaseResults) => void) | undefined;
}

/**
 * The right to work on one claimed key, under one fencing token. Obtained from
 * `IdempotencyEngine.begin`; ends with exactly one of {@link finish}, {@link release} or
 * {@link discard}.
 *
 * Work is split into named atomic phases (Brandur Leach's design; protocol.md K4). Each phase
 * commits its local database effects in the same transaction as the recovery point and its
 * JSON result. After a takeover, completed phases are skipped and return their recorded
 * result, so effects are never repeated. Phase results go through JSON on the first run too,
 * so the first run and a resumed run see the same values.
 *
 * @typeParam Tx the store's transaction handle (a SQL client for the PostgreSQL store).
 */
export class Execution<Tx = unknown> {
  /** The scope the key lives in. */
  readonly scope: string;
  /** The client's idempotency key. */
  readonly key: string;
  /** True when this execution took over from a worker whose lease expired. */
  readonly resumed: boolean;
  /** The recovery point this execution started from (`start` for a fresh claim). */
  readonly resumedFrom: string;
  /** Identifies this claim of the key (stable across takeovers); part of every derived key. */
  readonly claimId: string;
  /** After a takeover: the key's failed attempts as the store counts them, thrown ({@link countFailure}) and crashed (the takeover, protocol.md K23); `undefined` after a claim. */
  readonly failedAttempts: number | undefined;
  /** The response {@link finish} stored, once it has. */
  stored: StoredResponse | undefined;
  /**
   * When the key's retention ends (its claim's `created_at` + the engine's `retentionMs`), set
   * by the engine on a claim (from the store's retention left, else this process's clock) and
   * a takeover (from the row read); `undefined` when unknown (a completer's takeover). The HTTP
   * core's expiry header (protocol.md H40) sends it.
   */
  readonly retentionEndsAt: Date | undefined;

  private readonly ref: KeyRef;
  private readonly results: PhaseResults;
  /** Made on the first read of {@link signal}: most executions never read it. */
  private abort: AbortController | undefined;
  /** Set when the lease is lost: the reason of a signal made after that. */
  private lostWith: LeaseLostError | undefined;
  private timer: ReturnType<typeof setInterval> | undefined;
  private state: 'open' | 'done' | 'released' | 'lost' = 'open';
  private committed = 0;
  /** Set once this attempt handed out a derived key (protocol.md H41). */
  private derivedIssued = false;
  /** The last phase or call this attempt recorded. */
  private lastRecorded: string | undefined;

  /** @internal created by the engine */
  constructor(
    private readonly store: IdempotencyStore<Tx>,
    private readonly settings: ExecutionSettings,
    ref: KeyRef,
    claimId: string,
    recoveryPoint: string,
    phaseResults: PhaseResults,
  ) {
    this.ref = { ...ref };
    this.claimId = claimId;
    this.failedAttempts = settings.failedAttempts;
    this.retentionEndsAt = settings.retentionEndsAt;
    this.scope = ref.scope;
    this.key = ref.key;
    this.resumedFrom = recoveryPoint;
    this.resumed = recoveryPoint !== RECOVERY_POINT_START || Object.keys(phaseResults).length > 0;
    this.results = { ...phaseResults };
    this.startHeartbeat();
  }

  /** Aborted when the lease is lost (another worker took over); its reason is a {@link LeaseLostError}. */
  get signal(): AbortSignal {
    if (this.abort === undefined) {
      this.abort = new AbortController();
      if (this.lostWith !== undefined) this.abort.abort(this.lostWith);
    }
    return this.abort.signal;
  }

  /** The fencing token (`lock_version`) this execution holds. */
  get token(): number {
    return this.ref.token;
  }

  /** `open` while work may continue; otherwise how it ended: `done` (finished, response stored), `released` or `lost`. */
  get status(): 'open' | 'done' | 'released' | 'lost' {
    return this.state;
  }

  /** Notes a phase or call the store recorded (its result, the recovery point) and reports it. */
  private recorded(name: string, json: unknown): unknown {
    this.results[name] = json;
    this.lastRecorded = name;
    this.committed++;
    this.emit('phase-committed', name);
    return json;
  }

  /** The recovery point now: the last phase or call recorded, in this attempt or before it (`resumedFrom` until one is). */
  get recoveryPoint(): string {
    return this.lastRecorded ?? this.resumedFrom;
  }

  /** True when at least one atomic phase has committed for this key, in this or an earlier attempt. */
  get workStarted(): boolean {
    return this.committed > 0 || Object.keys(this.results).length > 0;
  }

  /**
   * The idempotency key for a downstream call named `name`: stable across retries and
   * takeovers, unique per scope, key and claim (protocol.md K11).
   */
  derivedKey(name: string): string {
    checkPhaseName(name);
    this.derivedIssued = true;
    return deriveKey(this.scope, this.key, this.claimId, name);
  }

  /**
   * True when a declared effect of this key may exist (protocol.md H41): a phase or call has
   * committed, in this attempt or an earlier one; this attempt handed out a derived key, which a
   * downstream system may have acted on; or this is a takeover, whose earlier attempts may have
   * handed out derived keys that nothing recorded. False only when a new key would be as safe as
   * this one.
   */
  get effectsMayExist(): boolean {
    return this.workStarted || this.derivedIssued || this.resumed || this.failedAttempts !== undefined;
  }

  /** True when the phase `name` has committed (in this or an earlier attempt). */
  completed(name: string): boolean {
    return Object.hasOwn(this.results, name);
  }

  /** The recorded result of phase `name`, or `undefined` if it has not completed. */
  result<T = unknown>(name: string): T | undefined {
    return this.results[name] as T | undefined;
  }

  /**
   * An atomic phase: runs `fn` in a transaction and, in the same transaction, records the
   * recovery point `name` with `fn`'s JSON result, fenced by the token. If the phase already
   * completed (a resumed execution), `fn` is not called and the recorded result is returned.
   *
   * @param name 1-64 characters of `[A-Za-z0-9_.-]`, unique within the work; not `start` or `finished`.
   * @param fn local database effects; must return a JSON-serialisable value.
   * @returns `fn`'s result after a JSON round trip
   * @throws {LeaseLostError} another worker took over; `fn`'s effects were rolled back.
   * @throws whatever `fn` throws (its effects are rolled back, the recovery point unchanged).
   */
  async phase<T>(name: string, fn: (tx: Tx) => Promise<T>): Promise<T> {
    checkPhaseName(name);
    if (this.completed(name)) {
      this.emit('phase-skipped', name);
      return this.results[name] as T;
    }
    this.ensureOpen();
    let json: unknown;
    const outcome = await this.store.commit<T>(
      this.ref,
      (value) => {
        json = toJson(value);
        return { kind: 'phase', phase: name, result: json, leaseMs: this.settings.leaseMs };
      },
      fn,
    );
    if (outcome.kind === 'fenced') throw this.lost();
    return this.recorded(name, json) as T;
  }

  /**
   * A call to an external system (payment provider, bank) as its own phase: `fn` runs
   * outside any transaction with the derived key for `name`, then its result is recorded as
   * the recovery point `name`. If the process dies between the call and the record, the
   * next attempt calls again with the same derived key, which the external system
   * deduplicates (protocol.md K11).
   *
   * @param fn receives the derived idempotency key and this execution's abort signal.
   * @throws {LeaseLostError} the lease was lost before the call or before its result was recorded.
   */
  async call<T>(name: string, fn: (derivedKey: string, signal: AbortSignal) => Promise<T>): Promise<T> {
    checkPhaseName(name);
    if (this.completed(name)) {
      this.emit('phase-skipped', name);
      return this.results[name] as T;
    }
    this.ensureOpen();
    const json = toJson(await fn(this.derivedKey(name), this.signal));
    this.ensureOpen();
    const outcome = await this.store.commit(this.ref, () => ({
      kind: 'phase',
      phase: name,
      result: json,
      leaseMs: this.settings.leaseMs,
    }));
    if (outcome.kind === 'fenced') throw this.lost();
    return this.recorded(name, json) as T;
  }

  /**
   * Finishes the key: stores the response (state `done`, lease cleared) in the same
   * transaction as the last local effects, when `response` is a function (protocol.md K5).
   *
   * @returns the stored response
   * @throws {LeaseLostError} another worker took over; nothing was stored, effects rolled back.
   */
  async finish(response: StoredResponse | ((tx: Tx) => Promise<StoredResponse>)): Promise<StoredResponse> {
    this.ensureOpen();
    let stored: StoredResponse;
    if (typeof response === 'function') {
      const outcome = await this.store.commit(this.ref, (r: StoredResponse) => ({ kind: 'finish', response: checkResponse(r) }), response);
      if (outcome.kind === 'fenced') throw this.lost();
      stored = outcome.value;
    } else {
      const outcome = await this.store.commit(this.ref, () => ({ kind: 'finish', response: checkResponse(response) }));
      if (outcome.kind === 'fenced') throw this.lost();
      stored = response;
    }
    this.stored = stored;
    this.close('done');
    this.emit('finished');
    this.settings.onFinished?.(stored, { ...this.results });
    return stored;
  }

  /**
   * Ends the lease without finishing, keeping the recovery point: the next retry takes over
   * at once and resumes after the last committed phase (protocol.md H10). Does nothing if the
   * execution already ended. Never throws for a lost lease (there is nothing left to release).
   */
  async release(): Promise<void> {
    if (this.state !== 'open') return;
    this.close('released');
    let outcome: Awaited<ReturnType<IdempotencyStore<Tx>['release']>>;
    try {
      outcome = await this.store.release(this.ref);
    } catch (error) {
      this.releaseLater();
      throw error;
    }
    this.emit(outcome.kind === 'ok' ? 'released' : 'lease-lost');
  }

  /** Ends this attempt with no write (protocol.md K50): the heartbeat stops and the key stays held until its lease runs out, when a takeover (a higher token) may run it again (K23 counts a crash). */
  abandon(): void {
    if (this.state !== 'open') return;
    this.close('released');
  }

  /**
   * protocol.md K23: a release the store missed (an outage, not the request's failure) is tried
   * again in the background for two leases, 250 ms doubling to 5 s apart, or the next takeover
   * would count a crash. Fenced: after a takeover it changes nothing. Giving up is reported as
   * `store-unavailable` for the key (and its token): the next takeover counts a crash.
   */
  private releaseLater(): void {
    const stopAt = performance.now() + 2 * this.settings.leaseMs;
    let delayMs = 250;
    const retry = () => {
      if (performance.now() + delayMs > stopAt) {
        this.emit('store-unavailable');
        return;
      }
      setTimeout(() => {
        this.store.release(this.ref).then(
          (outcome) => this.emit(outcome.kind === 'ok' ? 'released' : 'lease-lost'),
          () => {
            delayMs = Math.min(5000, delayMs * 2);
            retry();
          },
        );
      }, delayMs).unref?.();
    };
    retry();
  }

  /**
   * Stores the request's snapshot beside the key (fenced; option `storeRequests`), for a
   * completer to run it again without its client.
   * @returns false when another worker took the key over; nothing was stored
   * @throws {InvalidOptionError} the store keeps no requests
   */
  async saveRequest(request: RequestSnapshot): Promise<boolean> {
    this.ensureOpen();
    if (!hasCompletion(this.store)) throw new InvalidOptionError('idem: this store keeps no request snapshots (it does not declare completion)');
    return (await this.store.saveRequest(this.ref, request)).kind === 'ok';
  }

  /**
   * Counts a failed attempt on this key (fenced; the lease is kept), for `maxAttempts`.
   *
   * @returns the attempts failed so far over the key's life (every store counts, protocol.md K23)
   * @throws {LeaseLostError} another worker took over
   */
  async countFailure(): Promise<number> {
    this.ensureOpen();
    const outcome = await this.store.countFailure(this.ref);
    if (outcome.kind === 'fenced') throw this.lost();
    return outcome.value;
  }

  /**
   * The request was rejected before work started (validation): deletes the claim so the
   * client can fix the request and retry with the same key (protocol.md K10). A key
   * on which a phase has committed is released instead, never deleted.
   *
   * @returns `deleted`, `released`, or `fenced` when another worker holds the key.
   */
  async discard(): Promise<'deleted' | 'released' | 'fenced'> {
    if (this.state !== 'open') return 'fenced';
    this.close('released');
    const outcome = await this.store.discard(this.ref);
    if (outcome.kind === 'fenced') return 'fenced';
    this.emit(outcome.value === 'deleted' ? 'discarded' : 'released');
    return outcome.value;
  }

  /**
   * Extends the lease to `now() + leaseMs` by the database clock. The heartbeat does this on
   * its own; call it between long steps when the heartbeat is off.
   *
   * @throws {LeaseLostError} another worker took over.
   */
  async extendLease(): Promise<void> {
    this.ensureOpen();
    const outcome = await this.store.extendLease(this.ref, this.settings.leaseMs);
    if (outcome.kind === 'fenced') throw this.lost();
  }

  private startHeartbeat(): void {
    const { heartbeatMs, maxExecutionMs } = this.settings;
    if (!(heartbeatMs > 0)) return;
    // The budget is an interval this process measures: on the monotonic clock, so a wall-clock
    // step (NTP, VM resume) neither ends a live lease early nor keeps a hung one alive
    // (protocol.md K7). Lease expiry itself is database-clock arithmetic, in SQL.
    const stopAt = performance.now() + maxExecutionMs;
    this.timer = setInterval(() => {
      if (this.state !== 'open' || performance.now() >= stopAt) {
        this.stopHeartbeat();
        return;
      }
      this.store.extendLease(this.ref, this.settings.leaseMs).then(
        (outcome) => {
          if (outcome.kind === 'fenced' && this.state === 'open') this.lost();
        },
        () => {
          // A failed heartbeat is not a lost lease: the lease simply runs out if the store
          // stays unreachable, and the next fenced write tells the truth.
        },
      );
    }, heartbeatMs);
    this.timer.unref?.();
  }

  private stopHeartbeat(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  private close(state: 'done' | 'released' | 'lost'): void {
    this.state = state;
    this.stopHeartbeat();
  }

  private lost(): LeaseLostError {
    const error = new LeaseLostError();
    if (this.state === 'open') {
      this.close('lost');
      this.emit('lease-lost');
      this.lostWith = error;
      this.abort?.abort(error);
    }
    return error;
  }

  private ensureOpen(): void {
    if (this.state === 'lost') throw new LeaseLostError();
    if (this.state !== 'open') throw new ExecutionClosedError(`This execution has already ${this.state}`);
  }

  private emit(type: IdempotencyEvent['type'], phase?: string): void {
    const event: IdempotencyEvent = { type, scope: this.scope, key: this.key, token: this.ref.token };
    if (phase !== undefined) event.phase = phase;
    notify(this.settings.onEvent, event);
  }
}
