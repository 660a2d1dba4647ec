/**
 * The engine's batch (protocol.md K39): new keys' effects applied and their rows written
 * finished in one transaction, through the engine, so a batch gets the events, telemetry and
 * replay cache every single key gets. Keys that exist are decided as a claim decides them (K3).
 */
import { decide } from '../core/decide.js';
import { hasBatch } from '../store/capabilities.js';
import type { BatchingStore, IdempotencyStore, KeyRecord, StoredResponse } from '../store/types.js';
import { type IdempotencyEvent, notify } from './execution.js';
import type { ReplayCache } from './replay-cache.js';
import type { IdempotencyTelemetry } from './telemetry.js';

/** How one item of a batch ended; `undefined`: the batch could not decide it, run it on its own. */
export type BatchItemEnd = { kind: 'done' } | { kind: 'replay'; record: KeyRecord } | { kind: 'mismatch'; record: KeyRecord } | undefined;

/** What the batch needs of its engine. */
export interface BatchSettings<Tx> {
  store: IdempotencyStore<Tx>;
  leaseMs: number;
  retentionMs: number;
  onEvent: ((event: IdempotencyEvent) => void) | undefined;
  telemetry: IdempotencyTelemetry | undefined;
  replayCache: ReplayCache | undefined;
}

/** True when the store can batch (it declares the `batch` capability). */
export function canBatch<Tx>(store: IdempotencyStore<Tx>): store is IdempotencyStore<Tx> & BatchingStore<Tx> {
  return hasBatch<IdempotencyStore<Tx>, Tx>(store);
}

/**
 * Commits the batch: one outcome per item, in order, or `undefined` when the store cannot
 * batch now (each item then goes on its own). Throws when the batch rolled back.
 */
export async function commitBatch<Tx>(
  settings: BatchSettings<Tx>,
  scope: string,
  items: Array<{ key: string; fingerprint: Uint8Array }>,
  effects: (tx: Tx, index: number) => Promise<StoredResponse>,
): Promise<BatchItemEnd[] | undefined> {
  const store = settings.store;
  if (!canBatch(store)) return undefined;
  const startedAt = performance.now();
  const outcomes = await store.commitBatch({ scope, items, leaseMs: settings.leaseMs, retentionMs: settings.retentionMs }, effects);
  if (outcomes === undefined) return undefined;
  const ms = performance.now() - startedAt;
  return outcomes.map((outcome, i): BatchItemEnd => {
    const key = items[i]!.key;
    const decision = outcome.kind === 'done' ? 'done' : outcome.kind === 'exists' ? decide(outcome.record, items[i]!.fingerprint).kind : undefined;
    if (decision !== 'done' && decision !== 'replay' && decision !== 'mismatch') return undefined; // decided on its own path
    const req = settings.telemetry?.request(scope, key);
    req?.claimed(ms);
    if (decision === 'done') {
      notify(settings.onEvent, { type: 'claimed', scope, key });
      notify(settings.onEvent, { type: 'finished', scope, key });
      req?.outcome('created');
      req?.end('finished');
      return { kind: 'done' };
    }
    const record = (outcome as { record: KeyRecord }).record;
    if (decision === 'replay') settings.replayCache?.fill(record, startedAt);
    notify(settings.onEvent, { type: decision === 'replay' ? 'replayed' : 'mismatch', scope, key });
    req?.outcome(decision === 'replay' ? 'replayed' : 'mismatch');
    req?.end();
    return { kind: decision, record };
  });
}
