import { DEFAULT_LEASE_MS, DEFAULT_RETENTION_MS, KeyState, MAX_SCOPE_LENGTH } from '../core/constants.js';
import { decide } from '../core/decide.js';
import { IdempotencyError, InvalidOptionError, InvalidScopeError, StoreUnavailableError } from '../core/errors.js';
import { validateKey } from '../core/key.js';
import { sameFingerprint } from '../core/fingerprint.js';
import type { IdempotencyStore, KeyChanges, KeyRecord, StoredResponse } from '../store/types.js';
import { startWaiting, waitRefusal } from '../store/key-changes.js';
import { Attempt, type AttemptPolicy, runAttempt, type WorkOutcome } from './attempt.js';
import { type BatchItemEnd, commitBatch } from './batch.js';
import { Execution, type ExecutionSettings, type IdempotencyEvent, notify } from './execution.js';
import type { BeginInput, BeginResult, EngineOptions, RunOutcome } from './types.js';
import { ReplayCache } from './replay-cache.js';
import type { IdempotencyTelemetry, RequestTelemetry } from './telemetry.js';
import { TracedExecution } from './traced-execution.js';

export type { BeginInput, BeginResult, EngineOptions, RunOutcome } from './types.js';

/**
 * The idempotency protocol, independent of HTTP: claim, decide, take over, and hand out an
 * {@link Execution} to run atomic phases and finish (protocol.md K3-K5).
 *
 * @example
 * ```ts
 * const engine = new IdempotencyEngine({ store });
 * const begun = await engine.begin({ scope, key, fingerprint: fingerprint(req) });
 * if (begun.kind === 'execute') {
 *   const x = begun.execution;
 *   const order = await x.phase('order_created', (tx) => insertOrder(tx));
 *   const psp = await x.call('psp_charged', (derivedKey) => psp.charge(order, derivedKey));
 *   await x.finish(async (tx) => { await markPaid(tx, order, psp); return response; });
 * }
 * ```
 */
export class IdempotencyEngine<Tx = unknown> {
  readonly store: IdempotencyStore<Tx>;
  readonly leaseMs: number;
  readonly retentionMs: number;
  readonly heartbeatMs: number;
  readonly maxExecutionMs: number;
  /** How long a duplicate waits for an in-progress key, in ms; 0: not at all (see `EngineOptions.inProgress`). */
  readonly waitMs: number;
  /** How many duplicates of this process may wait at once (see `EngineOptions.inProgress`). */
  readonly maxWaiters: number;
  private readonly onEvent: ((event: IdempotencyEvent) => void) | undefined;
  private readonly telemetry: IdempotencyTelemetry | undefined;
  /** The replay cache (see `EngineOptions.replayCache`), or undefined when off. */
  readonly replayCache: ReplayCache | undefined;
  private readonly reads = new Map<string, { seen: number; read: Promise<KeyRecord | undefined> }>();

  /** @throws {InvalidOptionError} for a missing store or out-of-range durations. */
  constructor(options: EngineOptions<Tx>) {
    if (!options?.store || typeof options.store.claim !== 'function') {
      throw new InvalidOptionError('idem: `store` is required, e.g. new PostgresStore({ client })');
    }
    this.store = options.store;
    this.leaseMs = positiveMs('leaseMs', options.leaseMs ?? DEFAULT_LEASE_MS);
    this.retentionMs = positiveMs('retentionMs', options.retentionMs ?? DEFAULT_RETENTION_MS);
    if (this.retentionMs <= this.leaseMs) throw new InvalidOptionError('idem: retentionMs must be longer than leaseMs');
    this.heartbeatMs = options.heartbeatMs ?? Math.floor(this.leaseMs / 3);
    if (!(this.heartbeatMs >= 0) || (this.heartbeatMs > 0 && this.heartbeatMs >= this.leaseMs)) {
      throw new InvalidOptionError('idem: heartbeatMs must be 0 (off) or shorter than leaseMs');
    }
    this.maxExecutionMs = positiveMs('maxExecutionMs', options.maxExecutionMs ?? this.leaseMs * 10);
    // A lease can last until maxExecutionMs + leaseMs after the claim; a row past retention is
    // reclaimable, so retention must outlast any lease or a live worker's key could be reused.
    if (this.heartbeatMs > 0 && this.retentionMs <= this.maxExecutionMs + this.leaseMs) {
      throw new InvalidOptionError('idem: retentionMs must be longer than maxExecutionMs + leaseMs');
    }
    this.onEvent = options.onEvent;
    this.telemetry = options.telemetry;
    this.waitMs = options.inProgress?.wait ?? 0;
    if (!(Number.isFinite(this.waitMs) && this.waitMs >= 0 && this.waitMs <= this.leaseMs)) {
      throw new InvalidOptionError('idem: inProgress.wait must be a number of ms from 0 to leaseMs');
    }
    this.maxWaiters = options.inProgress?.maxWaiters ?? 10_000;
    if (!(Number.isInteger(this.maxWaiters) && this.maxWaiters >= 0)) throw new InvalidOptionError('idem: inProgress.maxWaiters must be an integer >= 0');
    const refusal = waitRefusal(this.store);
    if (this.waitMs > 0 && refusal !== undefined) throw new InvalidOptionError(refusal);
    const cache = options.replayCache;
    this.replayCache = cache === undefined ? undefined : cache instanceof ReplayCache ? cache : new ReplayCache(cache);
    this.replayCache?.attach(this.store, this.retentionMs);
  }

  /**
   * Claims the key or decides what to do with the existing one (protocol.md K3): mismatch → replay → in progress → take over, mismatch checked first.
   *
   * @throws {InvalidKeyError} the key is not 1-255 printable ASCII characters
   * @throws {InvalidScopeError} the scope is not a 1-255 character string
   * @throws {StoreUnavailableError} the store failed; nothing was claimed (fail closed, protocol.md H17)
   */
  async begin(input: BeginInput): Promise<BeginResult<Tx>> {
    if (!this.telemetry) return this.decideKey(input, undefined);
    const req = this.telemetry.request(input.scope, input.key);
    const started = performance.now();
    let begun: BeginResult<Tx>;
    try {
      begun = await this.decideKey(input, req);
    } catch (error) {
      if (error instanceof StoreUnavailableError) req.outcome('store_unavailable');
      req.end(undefined, error);
      throw error;
    }
    req.claimed(performance.now() - started);
    if (begun.kind === 'execute') return begun; // the execution reports its outcome and end
    if (begun.kind === 'replay') req.outcome(begun.waitedMs === undefined ? 'replayed' : 'waited', { waitedMs: begun.waitedMs, cached: begun.cached });
    else if (begun.kind === 'mismatch') req.outcome('mismatch', { cached: begun.cached });
    else req.outcome('in_progress');
    req.end();
    return begun;
  }

  private async decideKey(input: BeginInput, req: RequestTelemetry | undefined): Promise<BeginResult<Tx>> {
    const key = validateKey(input.key);
    const scope = input.scope;
    if (typeof scope !== 'string' || scope.length === 0 || scope.length > MAX_SCOPE_LENGTH) {
      throw new InvalidScopeError(`The scope must be a string of 1-${MAX_SCOPE_LENGTH} characters`);
    }
    if (!(input.fingerprint instanceof Uint8Array) || input.fingerprint.length !== 32) {
      throw new TypeError('idem: fingerprint must be 32 bytes (SHA-256)');
    }
    const lease = this.callLease(input.leaseMs);
    let waitMs = input.waitMs === undefined ? this.waitMs : waitRefusal(this.store) === undefined ? Math.min(Math.max(0, input.waitMs), this.leaseMs) : 0;
    if (input.maxWaitMs !== undefined) waitMs = Math.min(waitMs, Math.max(0, input.maxWaitMs));
    const cache = this.replayCache;
    if (cache !== undefined) {
      // protocol.md K20: a finished key is answered from memory, mismatch checked first (K3).
      const cached = cache.get(scope, key);
      if (cached !== undefined) return this.fromCache(cached, input.fingerprint);
    }
    const started = performance.now();
    let changes: KeyChanges | undefined;
    try {
      // A takeover can lose to another retry taking over at the same moment; the next turn
      // then sees that worker's valid lease (409) or its finished response. Turns spent
      // waiting (protocol.md K17) do not count: each one follows a change or the wait's end.
      for (let lostTakeovers = 0; lostTakeovers < 3; ) {
        // A waiter reads the key after subscribing and after each wake-up; the waiters of one
        // key in this process share that read (a finish wakes them all at once). An absent key
        // is claimed as usual.
        const shared = changes ? await this.readShared(scope, key, changes) : undefined;
        // Taken before the store is asked: the retention left it reports was measured later.
        const asked = performance.now();
        const claim = shared
          ? ({ kind: 'exists', record: shared } as const)
          : await this.store.claim({ scope, key, fingerprint: input.fingerprint, leaseMs: lease.leaseMs, retentionMs: this.retentionMs });
        if (claim.kind === 'claimed') {
          this.emit('claimed', scope, key, claim.token);
          req?.outcome('created', { token: claim.token });
          const remaining = claim.retentionRemainingMs;
          const fill =
            cache !== undefined && remaining !== undefined && (claim.sealed !== true || cache.sealed)
              ? this.fillOnFinish(cache, { scope, key, fingerprint: input.fingerprint, token: claim.token, claimId: claim.claimId }, remaining, asked)
              : undefined;
          // The row's created_at is the claim's now(): its retention ends a whole retention from here.
          const ends = new Date(Date.now() + (remaining ?? this.retentionMs));
          const execution = this.execution(scope, key, claim.token, claim.claimId, 'start', {}, req, fill, undefined, lease, ends);
          return { kind: 'execute', execution };
        }
        const record = claim.record;
        const decision = decide(record, input.fingerprint);
        switch (decision.kind) {
          case 'mismatch':
            this.emit('mismatch', scope, key);
            return { kind: 'mismatch', record };
          case 'replay': {
            if (!changes) {
              cache?.fill(record, asked);
              this.emit('replayed', scope, key);
              return { kind: 'replay', response: record.response!, record };
            }
            const waitedMs = performance.now() - started;
            notify(this.onEvent, { type: 'waited', scope, key, waitedMs });
            return { kind: 'replay', response: record.response!, record, waitedMs };
          }
          case 'in-progress': {
            const leftMs = waitMs - (performance.now() - started);
            // Subscribe first, then read again, then wait: a finish between the read and the
            // wait is never missed. The wait also ends when the lease does (a crashed worker
            // sends nothing), so the waiter may take over. Past maxWaiters: no place, the 409.
            if (leftMs > 0) {
              if (changes) await changes.next(Math.min(leftMs, record.leaseRemainingMs + 1));
              else changes = await startWaiting(this.store, scope, key, this.maxWaiters);
              if (changes) continue;
            }
            this.emit('in-progress', scope, key);
            return { kind: 'in-progress', retryAfterMs: record.leaseRemainingMs };
          }
          case 'take-over': {
            const ends = new Date(record.createdAt.getTime() + this.retentionMs);
            const execution = await this.takeOverWith({ scope, key, token: record.token }, req, lease, ends);
            if (!execution) {
              lostTakeovers++;
              continue;
            }
            return { kind: 'execute', execution };
          }
        }
      }
      return { kind: 'in-progress', retryAfterMs: 1000 };
    } catch (error) {
      // idem's own refusals (a bad key, an unreadable record) pass through; a store-side failure
      // a retry can outgrow (a deadline missed, a write not replicated) is the store unavailable.
      if (error instanceof StoreUnavailableError || (error instanceof IdempotencyError && !error.retryable)) throw error;
      this.emit('store-unavailable', scope, key);
      throw new StoreUnavailableError('The idempotency store is unavailable', { cause: error });
    } finally {
      changes?.close();
    }
  }

  /** The decision on a key found in the replay cache: mismatch first, else replay (protocol.md K3, K20). */
  private fromCache(record: KeyRecord, requestFingerprint: Uint8Array): BeginResult<Tx> {
    if (!sameFingerprint(record.fingerprint, requestFingerprint)) {
      this.emit('mismatch', record.scope, record.key);
      const { response: _response, ...withoutResponse } = record;
      return { kind: 'mismatch', record: withoutResponse, cached: true };
    }
    this.emit('replayed', record.scope, record.key);
    return { kind: 'replay', response: record.response!, record, cached: true };
  }

  /** The hook that caches this process's own finish of a key it claimed (protocol.md K20). */
  private fillOnFinish(
    cache: ReplayCache,
    claim: { scope: string; key: string; fingerprint: Uint8Array; token: number; claimId: string },
    remainingMs: number,
    asked: number,
  ): ExecutionSettings['onFinished'] {
    const fingerprint = new Uint8Array(claim.fingerprint);
    return (response, phaseResults) => {
      // The claim's time by this clock; the store's created_at is not read back.
      const createdAt = new Date(Date.now() - (performance.now() - asked));
      cache.fillFinished(
        { scope: claim.scope, key: claim.key, fingerprint, token: claim.token, claimId: claim.claimId, phaseResults, createdAt },
        response,
        remainingMs,
        asked,
      );
    };
  }

  /**
   * One read of (scope, key) shared by this process's waiters of the key: a read is joined
   * only while no change notification arrived since it was issued, so it reflects every change
   * the joining waiter could have missed (`KeyChanges.seen`).
   */
  private readShared(scope: string, key: string, changes: KeyChanges): Promise<KeyRecord | undefined> {
    const id = `${scope.length}:${scope}${key}`;
    const current = this.reads.get(id);
    if (current && current.seen === changes.seen) return current.read;
    const entry = { seen: changes.seen, read: this.store.get(scope, key, this.retentionMs) };
    this.reads.set(id, entry);
    const forget = () => {
      if (this.reads.get(id) === entry) this.reads.delete(id);
    };
    entry.read.then(forget, forget);
    return entry.read;
  }

  /**
   * One attempt of a key, owned here for every surface (protocol.md K5, K10, K23): claims and
   * decides ({@link begin}), ends a crash loop, runs `work`, then stores its outcome, or counts
   * its failure and stores the permanent outcome at the last attempt or releases the key.
   * Surfaces translate the {@link RunOutcome}; none decides it.
   *
   * @throws what {@link begin} throws (a bad key or scope, the store unavailable before the claim)
   */
  async run(input: BeginInput, policy: AttemptPolicy<Tx>, work: (execution: Execution<Tx>) => Promise<WorkOutcome<Tx>>): Promise<RunOutcome> {
    const begun = await this.begin(input);
    if (begun.kind !== 'execute') return begun;
    return runAttempt(new Attempt(begun.execution, policy), work);
  }

  /**
   * Commits a batch of new keys of `scope` in one transaction, `effects` per item (protocol.md
   * K39), with the events, telemetry and replay cache of single keys: one end per item
   * (`undefined`: run it on its own), or `undefined` when the store cannot batch.
   * @throws what the store throws when the batch rolled back (nothing committed)
   */
  commitBatch(
    scope: string,
    items: Array<{ key: string; fingerprint: Uint8Array }>,
    effects: (tx: Tx, index: number) => Promise<StoredResponse>,
  ): Promise<BatchItemEnd[] | undefined> {
    const { store, leaseMs, retentionMs, onEvent, telemetry, replayCache } = this;
    return commitBatch({ store, leaseMs, retentionMs, onEvent, telemetry, replayCache }, scope, items, effects);
  }

  /**
   * Takes over a `started` key found abandoned (a completer's work item, issue 4): a
   * compare-and-set on `ref.token`, exactly as a retry takes over (protocol.md Q3). The
   * execution resumes after the last committed phase, with the key's claim id, so derived
   * keys of downstream calls stay the same.
   *
   * @returns the execution, or `undefined` when another worker (a retry, another completer)
   *   took the key over first, renewed its lease, or finished it.
   * @throws whatever the store throws (it is unreachable); nothing was taken over.
   */
  async takeOver(ref: { scope: string; key: string; token: number }): Promise<Execution<Tx> | undefined> {
    const req = this.telemetry?.request(ref.scope, ref.key);
    try {
      const execution = await this.takeOverWith(ref, req);
      if (!execution) req?.end();
      return execution;
    } catch (error) {
      req?.end(undefined, error);
      throw error;
    }
  }

  /**
   * Resumes a claim this caller holds already (protocol.md K54): a Lambda durable execution,
   * replayed from its start after a wait or a crash, re-enters under the token and claim id it
   * checkpointed when it claimed. The key must still be `started` under exactly that token and
   * claim id, with the same fingerprint; the lease is then extended to `leaseMs` (fenced by the
   * token), and the execution continues after the last committed phase, with the same derived
   * keys. It is never a first attempt (H41: `maybe-applied`).
   *
   * @returns the execution, or `undefined` when the key is no longer held under `ref` (taken
   *   over, finished, released, gone): decide it as any request does ({@link begin}).
   * @throws {StoreUnavailableError} the store could not be read or written; nothing changed.
   */
  async resume(
    ref: { scope: string; key: string; token: number; claimId: string },
    requestFingerprint: Uint8Array,
    leaseMs?: number,
  ): Promise<Execution<Tx> | undefined> {
    const lease = this.callLease(leaseMs);
    try {
      const record = await this.store.get(ref.scope, ref.key, this.retentionMs);
      if (record === undefined || record.state !== KeyState.Started || record.token !== ref.token || record.claimId !== ref.claimId) return undefined;
      if (!sameFingerprint(record.fingerprint, requestFingerprint)) return undefined;
      const extended = await this.store.extendLease({ scope: ref.scope, key: ref.key, token: ref.token }, lease.leaseMs);
      if (extended.kind === 'fenced') return undefined;
      const ends = new Date(record.createdAt.getTime() + this.retentionMs);
      // failedAttempts 0, not undefined: a resumed attempt is not the claim's first (H41).
      return this.execution(ref.scope, ref.key, ref.token, ref.claimId, record.recoveryPoint, record.phaseResults, undefined, undefined, 0, lease, ends);
    } catch (error) {
      if (error instanceof StoreUnavailableError || (error instanceof IdempotencyError && !error.retryable)) throw error;
      this.emit('store-unavailable', ref.scope, ref.key);
      throw new StoreUnavailableError('The idempotency store is unavailable', { cause: error });
    }
  }

  private async takeOverWith(
    ref: { scope: string; key: string; token: number },
    req: RequestTelemetry | undefined,
    lease = this.callLease(undefined),
    retentionEndsAt?: Date,
  ) {
    const taken = await this.store.takeOver({ scope: ref.scope, key: ref.key, token: ref.token }, lease.leaseMs);
    if (taken.kind === 'lost') return undefined;
    this.emit('taken-over', ref.scope, ref.key, taken.token);
    req?.outcome('taken_over', { token: taken.token });
    const { token, claimId, recoveryPoint, phaseResults, failedAttempts } = taken;
    return this.execution(ref.scope, ref.key, token, claimId, recoveryPoint, phaseResults, req, undefined, failedAttempts, lease, retentionEndsAt);
  }

  /**
   * The lease and heartbeat of one call: the engine's, or the call's own lease with no
   * heartbeat (protocol.md K26). A per-call lease is checked here, not against the engine's
   * `leaseMs`: however short, it is valid (the work holds the key that long).
   * @throws {InvalidOptionError} a lease that is not a positive number, or that would outlast retention
   */
  private callLease(leaseMs: number | undefined): { leaseMs: number; heartbeatMs: number } {
    if (leaseMs === undefined) return { leaseMs: this.leaseMs, heartbeatMs: this.heartbeatMs };
    const ms = Math.ceil(leaseMs);
    if (!(Number.isFinite(ms) && ms >= 1)) throw new InvalidOptionError('idem: begin({ leaseMs }) must be a positive number of milliseconds');
    if (ms >= this.retentionMs) throw new InvalidOptionError(`idem: begin({ leaseMs: ${ms} }) must be shorter than retentionMs (${this.retentionMs})`);
    return { leaseMs: ms, heartbeatMs: 0 };
  }

  private execution(
    scope: string,
    key: string,
    token: number,
    claimId: string,
    recoveryPoint: string,
    results: Record<string, unknown>,
    req: RequestTelemetry | undefined,
    onFinished?: ExecutionSettings['onFinished'],
    failedAttempts?: number,
    lease = this.callLease(undefined),
    retentionEndsAt?: Date,
  ): Execution<Tx> {
    const settings = {
      retentionEndsAt,
      leaseMs: lease.leaseMs,
      heartbeatMs: lease.heartbeatMs,
      maxExecutionMs: this.maxExecutionMs,
      onEvent: this.onEvent,
      onFinished,
      failedAttempts,
    };
    const ref = { scope, key, token };
    if (req) return new TracedExecution<Tx>(this.store, settings, ref, claimId, recoveryPoint, results, req);
    return new Execution<Tx>(this.store, settings, ref, claimId, recoveryPoint, results);
  }

  private emit(type: IdempotencyEvent['type'], scope: string, key: string, token?: number): void {
    notify(this.onEvent, token === undefined ? { type, scope, key } : { type, scope, key, token });
  }
}

function positiveMs(name: string, value: number): number {
  if (!Number.isFinite(value) || value <= 0) throw new InvalidOptionError(`idem: ${name} must be a positive number of milliseconds`);
  return Math.floor(value);
}
