import type { KeyState } from '../core/constants.js';

/**
 * A response as stored and replayed: status, allow-listed headers (lower-case names, in
 * order; a name may repeat) and the exact body bytes (protocol.md H8).
 */
export interface StoredResponse {
  status: number;
  headers: Array<[string, string]>;
  body: Uint8Array;
}

/** Results of completed atomic phases, by phase name: JSON values. */
export type PhaseResults = Record<string, unknown>;

/** Identifies one claim: the key within its scope, held under a fencing token. */
export interface KeyRef {
  scope: string;
  key: string;
  /** The fencing token (`lock_version`) this worker holds; every write is conditional on it. */
  token: number;
}

/** An existing key row, as read on the conflict path (protocol.md Q2). */
export interface KeyRecord {
  scope: string;
  key: string;
  state: KeyState;
  /** SHA-256 of the canonical request, 32 bytes. */
  fingerprint: Uint8Array;
  /** Last completed atomic phase, or `start`. */
  recoveryPoint: string;
  phaseResults: PhaseResults;
  /** The current fencing token. */
  token: number;
  /** Identifies this claim of the key: kept across takeovers, new after a discard or retention. */
  claimId: string;
  /** True when the lease is NULL or in the past, by the database clock. */
  leaseExpired: boolean;
  /** Milliseconds left on the lease by the database clock; 0 when expired. */
  leaseRemainingMs: number;
  /**
   * Present when `state` is `done`. A store may leave it out of a claim's record when the
   * claim's fingerprint differs (a mismatch, never replayed), to skip reading a large or
   * encrypted body.
   */
  response?: StoredResponse;
  createdAt: Date;
  /**
   * Optional (the replay cache, protocol.md K20). Milliseconds of retention left when the store
   * read the record, by the store's own clock (`created_at` + the read's `retentionMs` − now;
   * ≤ 0 past retention). A store leaves it out when its clock is not real time (e.g. a
   * `MemoryStore` with an injected `clock`); such a record is never cached.
   */
  retentionRemainingMs?: number;
  /** Optional: true when `response` was stored sealed (encryption at rest, protocol.md K15) and opened by the store. */
  sealed?: boolean;
  /**
   * Optional (operators, protocol.md K40): the last operator action on the row, as the
   * {@link OperatorWrite} `note` it was written with (JSON text). Read by `get` only.
   */
  operatorNote?: string;
}

/**
 * An operator's write on one key (protocol.md K40-K42), fenced by the token the operator read.
 * - `release`: a `started` key's lease ends now (store `now()`), it is marked released (not a
 *   crash, K23) and the token advances, so the holder is fenced at its next write. Refused
 *   (fenced) while the lease is valid unless `force`.
 * - `forget`: a `done` key becomes claimable again: `started` at recovery point `start`, no
 *   response, no phase results, no request snapshot, no failed attempts, lease ended and
 *   released, a new token and a new claim id; its fingerprint and `created_at` stay.
 * Both record `note` on the row ({@link KeyRecord.operatorNote}).
 */
export interface OperatorWrite {
  action: 'release' | 'forget';
  /** The key and the token the operator read. */
  ref: KeyRef;
  /** `release` only: also end a valid lease. */
  force?: boolean;
  /** What the row records about this action (JSON text, at most 1024 characters). */
  note: string;
}

/**
 * What a completer needs of a request to run it again without its client (issue 4, Brandur
 * Leach's completer): method, path with query, content type and the exact body bytes.
 * Credentials (`Authorization`, `Cookie`) are never part of it; the key's scope says who sent it.
 */
export interface RequestSnapshot {
  /** HTTP method, upper case. */
  method: string;
  /** Path with query, e.g. `/v1/charges?expand=x`. */
  url: string;
  /** The request's `Content-Type`, or `null`. */
  contentType: string | null;
  /** Raw body bytes, or `null` for none. */
  body: Uint8Array | null;
}

/** A `started` key whose lease expired (or was released) with no worker on it: a completer's work item. */
export interface AbandonedKey {
  record: KeyRecord;
  /** The request as stored by `saveRequest`, or `undefined` when none was stored. */
  request?: RequestSnapshot;
}

/** Input of a claim (protocol.md K3). */
export interface ClaimInput {
  scope: string;
  key: string;
  fingerprint: Uint8Array;
  /** Lease length in ms, added to the database's `now()`. */
  leaseMs: number;
  /** Retention in ms: an existing row older than this counts as absent and is replaced. */
  retentionMs: number;
}

/**
 * A store that can also batch (protocol.md K39), e.g. `PostgresStore`: the `batch` capability
 * (src/store/capabilities.ts `hasBatch`), kept off {@link IdempotencyStore} so that a store
 * typed for one transaction handle still fits another.
 */
export interface BatchingStore<Tx = unknown> {
  /**
   * In ONE transaction: takes every new key of
   * `items` (all in `scope`, distinct keys), runs `effects(tx, i)` for each, in order, and
   * finishes those keys with the responses `effects` returned, fenced so that a key another
   * worker claimed meanwhile is never finished by the batch (PostgreSQL: the keys' rows are
   * inserted finished, and a row that appeared since the read rolls the batch back); nothing
   * is visible before the commit. A key that already exists is not taken and its effects do
   * not run: it is reported `exists` with its record, for the caller to decide (protocol.md
   * K3). A key the batch cannot decide is reported `alone`. If `effects` throws, or any
   * statement fails, everything rolls back and the error propagates: the caller then handles
   * each item on its own.
   *
   * @returns one outcome per item, in order; `undefined` when this store cannot batch in its
   *   current configuration (the caller handles each item on its own).
   */
  commitBatch(input: BatchInput, effects: (tx: Tx, index: number) => Promise<StoredResponse>): Promise<BatchOutcome[] | undefined>;
}

/** Input of {@link BatchingStore.commitBatch}: distinct keys of one scope, each with its fingerprint. */
export interface BatchInput {
  scope: string;
  items: Array<{ key: string; fingerprint: Uint8Array }>;
  leaseMs: number;
  retentionMs: number;
}

/** One item's outcome in {@link BatchingStore.commitBatch}: finished by the batch, found existing, or left to its own path. */
export type BatchOutcome = { kind: 'done' } | { kind: 'exists'; record: KeyRecord } | { kind: 'alone' };

/** Outcome of a claim: this worker owns the key, or the key already exists. */
export type ClaimResult =
  | {
      kind: 'claimed';
      token: number;
      claimId: string;
      /**
       * Optional (the replay cache, protocol.md K20): the new row's retention left, by the
       * store's clock, when it was written (the claim's `retentionMs`: `created_at` is the
       * claim's own `now()`). Left out when the store's clock is not real time.
       */
      retentionRemainingMs?: number;
      /** Optional: true when this store will seal the response it stores for the key (encryption at rest, protocol.md K15). */
      sealed?: boolean;
    }
  | { kind: 'exists'; record: KeyRecord };

/** Outcome of a takeover attempt. */
export type TakeOverResult =
  | {
      kind: 'taken';
      token: number;
      claimId: string;
      recoveryPoint: string;
      phaseResults: PhaseResults;
      /**
       * `maxAttempts` (protocol.md K23): the attempts failed so far over the key's life, this
       * takeover's own count included. The store counts, in the takeover's own atomic step, the
       * attempt whose lease ran out without a release (a crash, a kill, a hang); a released key
       * (a thrown error, counted or excused by its worker) is not counted again.
       */
      failedAttempts?: number;
    }
  /** Someone else took over, the lease was renewed, the key finished, or it is gone: read again. */
  | { kind: 'lost' };

/** Outcome of a fenced write: done, or the token is stale and nothing changed. */
export type Fenced<T = void> = { kind: 'ok'; value: T } | { kind: 'fenced' };

/**
 * What a commit records together with its local effects: either an atomic phase's recovery
 * point and result (the lease is renewed), or the final response (state `done`, lease cleared).
 */
export type CommitRecord = { kind: 'phase'; phase: string; result: unknown; leaseMs: number } | { kind: 'finish'; response: StoredResponse };

/**
 * A subscription to changes of one key (see {@link IdempotencyStore.subscribe}): resolves
 * {@link KeyChanges.next} when a finish, release, discard or takeover of the key committed after
 * the subscription became active. A change that arrived between two `next` calls is kept, so
 * none is missed between a read and the wait that follows it.
 */
export interface KeyChanges {
  /**
   * Waits for the next change of the key, at most `timeoutMs` ms.
   * @returns `true` when the key changed (read it again), `false` on timeout or when `signal` aborted
   */
  next(timeoutMs: number, signal?: AbortSignal): Promise<boolean>;
  /** Ends the subscription; idempotent. */
  close(): void;
  /**
   * How many change notifications (of any key of the store) this process has received so far,
   * counting a lost notification channel as one. A read of the store issued while `seen` had
   * the value it has now reflects every change this subscription could have missed, so the
   * waiters of one process may share it.
   */
  readonly seen: number;
}

/**
 * The storage behind idem: one row per (scope, key). Expected outcomes are result unions;
 * only failures of the store itself throw. Every method after `claim` is fenced by the
 * token: a worker whose token is stale changes nothing and gets `{ kind: 'fenced' }`.
 *
 * @typeParam Tx the transaction handle passed to local effects (for the PostgreSQL store,
 *   a client on which the transaction is open).
 */
export interface IdempotencyStore<Tx = unknown> {
  /**
   * Inserts the key as `started` with a lease, committed on its own so concurrent duplicates
   * see it at once (protocol.md Q1). A row past retention is replaced as if absent.
   * On conflict returns the existing row (protocol.md Q2).
   */
  claim(input: ClaimInput): Promise<ClaimResult>;

  /**
   * Takes over a `started` key whose lease expired, only if its token is still `expectedToken`
   * (protocol.md Q3). The new token is higher than every token handed out before for
   * this key. A lease that ran out unreleased counts as a failed attempt in the same step (protocol.md K23, {@link TakeOverResult} `failedAttempts`).
   */
  takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult>;

  /**
   * Runs `effects` and records `record(value)` in one transaction, fenced by `ref.token`
   * (protocol.md K4-K5). If the token is stale the effects are rolled back and the result is
   * `fenced`. If `effects` throws, everything is rolled back and the error propagates.
   */
  commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects: (tx: Tx) => Promise<T>): Promise<Fenced<T>>;
  /** A commit with no local effects: records `record(undefined)` alone, fenced by `ref.token`. */
  commit(ref: KeyRef, record: (value: undefined) => CommitRecord): Promise<Fenced>;

  /** Extends the lease to `now() + leaseMs` (the heartbeat, protocol.md H16). */
  extendLease(ref: KeyRef, leaseMs: number): Promise<Fenced>;

  /**
   * Ends this worker's lease without finishing, keeping the recovery point, so the next retry
   * takes over at once and resumes (protocol.md H10). The key is marked released until the next
   * takeover, which then does not count this attempt as a crash (protocol.md K23).
   */
  release(ref: KeyRef): Promise<Fenced<'released'>>;

  /**
   * Deletes a key on which no phase has committed: the request was rejected before work
   * started and the client may fix it and retry with the same key (protocol.md K10).
   * A key with a committed phase is released instead (see {@link release}), never deleted.
   */
  discard(ref: KeyRef): Promise<Fenced<'deleted' | 'released'>>;

  /**
   * Counts a failed attempt on a key this worker holds (`maxAttempts`, protocol.md K23),
   * fenced by the token, keeping the lease; resolves to the attempts failed so far over the
   * key's life.
   */
  countFailure(ref: KeyRef): Promise<Fenced<number>>;

  /** Reads a key, or `undefined` when absent or past retention. */
  get(scope: string, key: string, retentionMs: number): Promise<KeyRecord | undefined>;

  /**
   * `completion` capability (completer). Stores the request snapshot on a key this worker holds, fenced by
   * the token, so a completer can finish the work if the client never retries. Called before
   * the work starts.
   */
  saveRequest?(ref: KeyRef, request: RequestSnapshot): Promise<Fenced>;

  /**
   * `completion` capability (completer). Lists up to `limit` keys that are `started`, within retention, and
   * whose lease ended at least `graceMs` ms ago, oldest lease first. A release ends the lease at
   * the store's now, so a released key waits `graceMs` too (the client that saw the throw retries
   * first, protocol.md K10); {@link takeOver} still takes it at once. Only a
   * read: the caller takes each over with {@link takeOver}, a compare-and-set on the token, so
   * two completers never drive the same key.
   */
  listAbandoned?(options: { limit: number; graceMs: number; retentionMs: number }): Promise<AbandonedKey[]>;

  /**
   * `completion` capability (completer). Deletes a listed key on which nothing ran, only if it is still as
   * listed: the same token, `started` at the recovery point `start`, no request stored, lease
   * not valid. One compare-and-set, so a worker that saved its request (and may have called
   * downstream with its derived key) after the listing keeps its key.
   * @returns `ok` when deleted, `fenced` when the key changed.
   */
  discardAbandoned?(ref: KeyRef): Promise<Fenced>;

  /**
   * `notify` capability (wait mode, protocol.md K17). Subscribes to changes of one key: every finish,
   * release, discard and takeover of it, by any process sharing the store, wakes the
   * subscription once committed. Resolves once the subscription is active, so the caller
   * subscribes first, reads the key, then waits: a change committed after the read is never
   * missed. A store without it cannot serve `inProgress.wait`. Spurious wake-ups are allowed
   * (the caller reads again); a wake-up that never comes only costs the caller its wait.
   */
  subscribe?(scope: string, key: string): Promise<KeyChanges>;

  /**
   * `operator` capability (protocol.md K40-K42). One {@link OperatorWrite}, atomic and fenced by
   * `write.ref.token` and the state it needs (`started` for a release, `done` for a forget; a
   * release without `force` also needs the lease ended).
   * @returns `ok` with the key's new token, or `fenced` when the key is not as read: nothing changed.
   */
  operate?(write: OperatorWrite): Promise<Fenced<{ token: number }>>;

  /**
   * Optional: why this store does not declare `notify` (e.g. its database cannot notify), named
   * in the `InvalidOptionError` an engine with `inProgress.wait` throws on it. An explanation
   * only: whether a store can wait is its declaration (`waitRefusal`, src/store/key-changes.ts);
   * on a store that declares `notify`, this is ignored.
   */
  readonly noSubscribe?: string;

  /**
   * What this store can do beyond the core, declared (protocol.md "Store capabilities",
   * src/store/capabilities.ts): a store that declares a capability has its methods. Absent:
   * the core only. Read through the guards (`hasCompletion`, `hasNotify`, `hasBatch`,
   * `hasOperator`, `hasMaintenance`), never by looking for a method.
   */
  readonly capabilities?: StoreCapabilities;
}

/** The name of one capability beyond the core (src/store/capabilities.ts). */
export type StoreCapability = 'completion' | 'notify' | 'batch' | 'operator' | 'maintenance';

/** What a store declares it can do beyond the core: each capability it has, `true`; one it has not is absent. */
export type StoreCapabilities = Readonly<Partial<Record<StoreCapability, true>>>;

/**
 * The transaction handle a store hands a phase's effects, e.g. `TxOf<typeof store>`: for a
 * `PostgresStore` on a `pg.Pool` a `Queryable`, on `postgresjs(sql)` postgres.js's
 * `TransactionSql`. For naming the type where it cannot be inferred (a NestJS parameter, a
 * Hono `Variables` declaration).
 */
export type TxOf<S> = S extends IdempotencyStore<infer Tx> ? Tx : never;
