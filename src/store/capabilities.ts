/**
 * What a store can do beyond the core (protocol.md "Store capabilities"): every store has the
 * core of {@link IdempotencyStore} (claim, takeover, fenced commit, lease, release, discard,
 * count, get); the rest it declares in its readonly `capabilities`, and callers ask the
 * declaration through the guards below instead of looking for methods one by one.
 *
 * - `completion`: keeps request snapshots and lists abandoned keys for a completer
 *   ({@link CompletionStore}, protocol.md K12-K13).
 * - `notify`: wakes waiting duplicates ({@link NotifyStore}, wait mode, protocol.md K17).
 * - `batch`: commits several new keys in one transaction ({@link BatchingStore}, protocol.md K39).
 * - `operator`: an operator's fenced release and forget ({@link OperatorStore}, protocol.md K40-K42).
 * - `maintenance`: a table to migrate and sweep ({@link MaintenanceStore}, protocol.md K6), with
 *   the operator's reads of it (`inspect`, `stats`) whose shapes the store's package names.
 */
import type { AbandonedKey, BatchingStore, Fenced, IdempotencyStore, KeyChanges, KeyRef, OperatorWrite, RequestSnapshot, StoreCapability } from './types.js';

export type { StoreCapabilities, StoreCapability } from './types.js';

/** `completion`: what a completer needs (protocol.md K12-K13); see the methods' docs on {@link IdempotencyStore}. */
export interface CompletionStore {
  saveRequest(ref: KeyRef, request: RequestSnapshot): Promise<Fenced>;
  listAbandoned(options: { limit: number; graceMs: number; retentionMs: number }): Promise<AbandonedKey[]>;
  /** Optional within `completion`: a store without it leaves a listed key on which nothing ran to its retention. */
  discardAbandoned?(ref: KeyRef): Promise<Fenced>;
}

/** `notify`: wait mode's subscriptions (protocol.md K17); see {@link IdempotencyStore.subscribe}. */
export interface NotifyStore {
  subscribe(scope: string, key: string): Promise<KeyChanges>;
}

/** `operator`: one fenced operator write (protocol.md K40-K42); see {@link IdempotencyStore.operate}. */
export interface OperatorStore {
  operate(write: OperatorWrite): Promise<Fenced<{ token: number }>>;
}

/**
 * `maintenance`: a table that is created and upgraded (`migrate`, idempotent) and swept of keys
 * past retention (`sweep`, protocol.md K6). A store that declares it also reads the table for an
 * operator (`inspect`, `stats`, `sweepPlan`, `sweepReport`), in the shapes its package exports.
 */
export interface MaintenanceStore {
  migrate(): Promise<{ table: 'created' | 'exists'; partitionsCreated: string[] }>;
  sweep(options?: { retentionMs?: number; batchSize?: number }): Promise<number>;
}

type AnyStore = Pick<IdempotencyStore<never>, 'capabilities'>;

/** Whether `store` declares `capability`. */
export function declares(store: AnyStore, capability: StoreCapability): boolean {
  return store.capabilities?.[capability] === true;
}

/** Whether `store` keeps request snapshots and lists abandoned keys (`completion`). */
export function hasCompletion<S extends AnyStore>(store: S): store is S & CompletionStore {
  return declares(store, 'completion');
}

/** Whether `store` wakes waiting duplicates (`notify`). */
export function hasNotify<S extends AnyStore>(store: S): store is S & NotifyStore {
  return declares(store, 'notify');
}

/** Whether `store` commits batches (`batch`). */
export function hasBatch<S extends AnyStore, Tx = unknown>(store: S): store is S & BatchingStore<Tx> {
  return declares(store, 'batch');
}

/** Whether `store` takes an operator's release and forget (`operator`). */
export function hasOperator<S extends AnyStore>(store: S): store is S & OperatorStore {
  return declares(store, 'operator');
}

/** Whether `store` has a table to migrate and sweep (`maintenance`). */
export function hasMaintenance<S extends AnyStore>(store: S): store is S & MaintenanceStore {
  return declares(store, 'maintenance');
}
