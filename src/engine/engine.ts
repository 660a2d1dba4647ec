import { DEFAULT_LEASE_MS, DEFAULT_RETENTION_MS, MAX_SCOPE_LENGTH } from '../core/constants.js';
import { decide } from '../core/decide.js';
import { IdempotencyError, InvalidOptionError, InvalidScopeError, StoreUnavailableError } from '../core/errors.js';
import { validateKey } from '../core/key.js';
import { sameFingerprint } from '../core/fingerprint.js';
import type { IdempotencyStore, KeyChanges, KeyRecord, StoredResponse } from '../store/types.js';
import { startWaiting, waitRefusal } from '../store/key-changes.js';
import { Execution, type ExecutionSettings, type IdempotencyEvent, notify } from './execution.js';
import { ReplayCache, type ReplayCacheOptions } from './replay-cache.js';
import type { IdempotencyTelemetry, RequestTelemetry } from './telemetry.js';
import { TracedExecution } from './traced-execution.js';

/** Options of {@link IdempotencyEngine}. */
export interface EngineOptions<Tx = unknown> {
  /** Where keys live, e.g. `new PostgresStore({ client })`. */
  store: IdempotencyStore<Tx>;
  /**
   * Lease in ms: how long a claim stays exclusive without a write or heartbeat. Must exceed
   * the longest gap between two commits (an external call with its timeout). After it, a
   * retry takes over.
   * @default 60_000
   */
  leaseMs?: number;
  /**
   * Retention in ms, counted from the claim; replays do not extend it. A row past retention
   * counts as absent (protocol.md H18).
   * @default 86_400_000 (24 h)
   */
  retentionMs?: number;
  /**
   * Heartbeat period in ms: the lease is extended this often while work runs (protocol.md H16). `0` turns it off.
   * @default leaseMs / 3
   */
  heartbeatMs?: number;
  /**
   * After this many ms the heartbeat stops extending the lease, so a hung worker cannot hold
   * a key forever; its lease then runs out and a retry takes over.
   * @default 10 × leaseMs
   */
  maxExecutionMs?: number;
  /** Called for every protocol event (claimed, replayed, taken-over, …), for logs and metrics. Must not throw. */
  onEvent?: (event: IdempotencyEvent) => void;
  /**
   * What a duplicate does while its key is in progress (protocol.md K17). `wait`: how long, in
   * ms, it waits for the first request to finish and then replays its result, instead of the
   * 409 at once; a release or takeover during the wait wakes it into the decision again (it
   * may take over). At most `leaseMs`. Needs a store with `subscribe`: `MemoryStore`,
   * `RedisStore` (Redis 7), `PostgresStore` with `notify: true` (also on PGlite).
   * `maxWaiters`: how many duplicates of this process may wait at once; past it a duplicate
   * gets the 409 at once (memory stays bounded).
   * @default { wait: 0, maxWaiters: 10000 } (no waiting: 409 at once)
   */
  inProgress?: { wait?: number; maxWaiters?: number };
  /**
   * Traces and metrics of every request: `await openTelemetry()` from `idem/otel` (spans and
   * metrics named in docs/observability.md), or any {@link IdempotencyTelemetry}.
   */
  telemetry?: IdempotencyTelemetry;
  /**
   * Answers retries of finished keys from this process's memory, with no store round trip
   * (protocol.md K20): a {@link ReplayCache} (share one between the engines of one store), or
   * its options to make one. Mismatches are still detected (the fingerprint is in the entry);
   * no entry outlives its row's retention by the store's clock; sealed responses only with
   * `sealed: true`.
   * @default undefined (off: every retry reads the store)
   */
  replayCache?: ReplayCache | ReplayCacheOptions;
}

/** What a request carries into the engine. */
export interface BeginInput {
  /** Tenant / API credential the key belongs to, 1-255 characters (protocol.md H6). */
  scope: string;
  /** The client's idempotency key, 1-255 printable ASCII characters. */
  key: string;
  /** SHA-256 of the canonical request (see `fingerprint`), 32 bytes. */
  fingerprint: Uint8Array;
  /**
   * How long, in ms, this caller waits for an in-progress key (protocol.md K17), in place of the
   * engine's `inProgress.wait`; at most `leaseMs`. `0` when the store cannot wake waiters (no
   * `subscribe`), so a caller may ask for it whatever the store (a queue consumer, K18).
   */
  waitMs?: number;
  /** At most this long, in ms, whatever the wait (e.g. an invocation's remaining time less a margin). */
  maxWaitMs?: number;
  /**
   * This call's lease in ms, in place of the engine's `leaseMs` (protocol.md K26): for a caller
   * that knows when it will be stopped (a Lambda invocation's remaining time plus a margin). The
   * claim or takeover and every phase commit hold the key this long, with no heartbeat. Any
   * whole number of ms from 1 (a fraction is rounded up), shorter than the engine's retention.
   * @default the engine's `leaseMs`, with its heartbeat
   */
  leaseMs?: number;
}

/** Outcome of {@link IdempotencyEngine.begin}. */
export type BeginResult<Tx = unknown> =
  /** This worker owns the key (a fresh claim, or a takeover resuming from a recovery point). */
  | { kind: 'execute'; execution: Execution<Tx> }
  /** The key finished earlier (or, with `waitedMs`, while this duplicate waited for it): return this response. */
  | { kind: 'replay'; response: StoredResponse; record: KeyRecord; waitedMs?: number; cached?: true }
  /** Same key, different request (checked first). `cached`: decided from the replay cache. */
  | { kind: 'mismatch'; record: KeyRecord; cached?: true }
  /** Another worker holds a valid lease; retry after `retryAfterMs` ms. */
  | { kind: 'in-progress'; retryAfterMs: number };

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
    const started = performance.now();
    const cache = this.replayCache;
    if (cache !== undefined) {
      // protocol.md K20: a finished key is answered from memory, mismatch checked first (K3).
      const cached = cache.get(scope, key);
      if (cached !== undefined) return this.fromCache(cached, input.fingerprint);
    }
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
          const execution = this.execution(scope, key, claim.token, claim.claimId, 'start', {}, req, fill, undefined, lease);
          // The row's created_at is the claim's now(): its retention ends a whole retention from here.
          execution.retentionEndsAt = new Date(Date.now() + (remaining ?? this.retentionMs));
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
            const execution = await this.takeOverWith({ scope, key, token: record.token }, req, lease);
            if (!execution) {
              lostTakeovers++;
              continue;
            }
            execution.retentionEndsAt = new Date(record.createdAt.getTime() + this.retentionMs);
            return { kind: 'execute', execution };
          }
        }
      }
      return { kind: 'in-progress', retryAfterMs: 1000 };
    } catch (error) {
      if (error instanceof IdempotencyError) throw error;
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

  private async takeOverWith(ref: { scope: string; key: string; token: number }, req: RequestTelemetry | undefined, lease = this.callLease(undefined)) {
    const taken = await this.store.takeOver({ scope: ref.scope, key: ref.key, token: ref.token }, lease.leaseMs);
    if (taken.kind === 'lost') return undefined;
    this.emit('taken-over', ref.scope, ref.key, taken.token);
    req?.outcome('taken_over', { token: taken.token });
    return this.execution(ref.scope, ref.key, taken.token, taken.claimId, taken.recoveryPoint, taken.phaseResults, req, undefined, taken.failedAttempts, lease);
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
  ): Execution<Tx> {
    const settings = {
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
