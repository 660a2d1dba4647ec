/**
 * A batch of keys applied and finished in one transaction (protocol.md K39), for a consumer
 * that received several deliveries at once: one BEGIN, one read of the keys' rows, the effects
 * of the new keys, one statement inserting their rows already finished (fenced by the primary
 * key) and one COMMIT serve the whole batch, where each key on its own would take a claim, a
 * transaction and a finish, and write its row twice.
 */
import type { BatchInput, BatchOutcome, StoredResponse } from '../store/types.js';
import type { StoreContext } from './context.js';
import { storedForm } from '../store/stored-form.js';
import { readRecord } from './responses.js';
import type { Row } from './rows.js';

/** Thrown inside the transaction to roll it back: a key of the batch was claimed since the read (protocol.md K39 1). */
class BatchFenced extends Error {
  constructor() {
    super('idem/postgres: a key of the batch was claimed since its read; the batch rolled back');
  }
}

const hex = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');
const base64 = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');

/** See `IdempotencyStore.commitBatch`; `undefined` where a batch cannot keep the store's promises. */
export async function commitBatch<Tx>(
  ctx: StoreContext<Tx>,
  input: BatchInput,
  effects: (tx: Tx, index: number) => Promise<StoredResponse>,
): Promise<BatchOutcome[] | undefined> {
  // Partitioned and Citus claims take other paths; a notifying store's finish must notify
  // (protocol.md K17), which the batched finish does not.
  if (ctx.psql || ctx.citus || ctx.channel) return undefined;
  const { scope, items } = input;
  const outcomes: BatchOutcome[] = items.map(() => ({ kind: 'alone' }));
  const existing: Array<{ index: number; row: Row }> = [];
  await ctx.db.clientTransaction(async (tx, sql) => {
    const readJson = JSON.stringify(items.map((i) => ({ s: scope, k: i.key, r: Math.round(input.retentionMs) })));
    const rows = (await ctx.db.queryOn(sql, ctx.sql.batchRead, [readJson])).rows;
    const byKey = new Map(rows.map((row) => [String(row.key), row]));
    const inserts: Array<{ k: string; f: string; st: number; h: string; b: string; kid: string | null }> = [];
    for (let index = 0; index < items.length; index++) {
      const item = items[index]!;
      const row = byKey.get(item.key);
      if (row) {
        // Past retention with its lease ended: replaced on the key's own path, like a claim does.
        if (!(row.retention_expired === true && row.lease_expired === true)) existing.push({ index, row });
        continue;
      }
      const response = await effects(tx, index);
      const form = storedForm(ctx, { scope, key: item.key }, response);
      // An out-of-line body needs its blob written with the row: such a batch goes key by key.
      if (form.blob) throw new BatchTooLarge();
      inserts.push({ k: item.key, f: hex(item.fingerprint), st: response.status, h: form.headers, b: base64(form.body!), kid: form.keyId });
      outcomes[index] = { kind: 'done' };
    }
    if (inserts.length === 0) return;
    const inserted = (await ctx.db.queryOn(sql, ctx.sql.batchInsertDone, [JSON.stringify(inserts.map((f) => ({ s: scope, ...f })))])).rows;
    // Fenced by the key itself (protocol.md K39 1): a key claimed since the read keeps its row.
    if (inserted.length !== inserts.length) throw new BatchFenced();
  });
  for (const { index, row } of existing) {
    outcomes[index] = { kind: 'exists', record: await readRecord(ctx as StoreContext, row, scope, items[index]!.key, items[index]!.fingerprint) };
  }
  return outcomes;
}

/** A response too large to store inline: the batch rolls back and each key takes its own path. */
export class BatchTooLarge extends Error {
  constructor() {
    super('idem/postgres: a batched response is too large to store inline; the batch rolled back');
  }
}
