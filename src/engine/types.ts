import type { IdempotencyStore, KeyRecord, StoredResponse } from '../store/types.js';
import type { AttemptEnd } from './attempt.js';
import type { Execution, IdempotencyEvent } from './execution.js';
import type { ReplayCache, ReplayCacheOptions } from './replay-cache.js';
import type { IdempotencyTelemetry } from './telemetry.js';

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

/** Outcome of {@link IdempotencyEngine.run}: the decision when the work did not run, else how its attempt ended. */
export type RunOutcome = Exclude<BeginResult, { kind: 'execute' }> | AttemptEnd;
