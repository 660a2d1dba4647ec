/**
 * A batch of keys claimed, applied and finished in one transaction (protocol.md K39), for a
 * consumer that received several deliveries at once: one BEGIN, one claim statement, the
 * effects, one fenced finish statement and one COMMIT serve the whole batch, where each key on
 * its own would take a claim, a transaction and a finish.
 */
import type { BatchInput, BatchOutcome, StoredResponse } from '../store/types.js';
import type { StoreContext } from './options.js';
import { readRecord, storedForm } from './responses.js';
import type { Row } from './rows.js';

/** Thrown inside the transaction to roll it back: a finish matched no row (cannot happen while the claim's row lock is held). */
class BatchFenced extends Error {
  constructor() {
    super('idem/postgres: a batched finish was fenced; the batch rolled back');
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
    const claimJson = JSON.stringify(
      items.map((i) => ({ s: scope, k: i.key, f: hex(i.fingerprint), l: Math.round(input.leaseMs), r: Math.round(input.retentionMs) })),
    );
    const rows = (await ctx.db.queryOn(sql, ctx.sql.groupClaim, [claimJson])).rows;
    const byKey = new Map(rows.map((row) => [String(row.key), row]));
    const finishes: Array<{ k: string; v: number; st: number; h: string; b: string; kid: string | null }> = [];
    for (let index = 0; index < items.length; index++) {
      const row = byKey.get(items[index]!.key);
      if (!row) continue; // lost a race to another claim of the key: its own path decides
      if (row.kind !== 'claimed') {
        // Past retention with its lease ended: replaced on the key's own path, like a claim does.
        if (!(row.retention_expired === true && row.lease_expired === true)) existing.push({ index, row });
        continue;
      }
      const ref = { scope, key: items[index]!.key, token: Number(row.lock_version) };
      const response = await effects(tx, index);
      const form = storedForm(ctx, ref, response);
      // An out-of-line body needs its blob written with the row: such a batch goes key by key.
      if (form.blob) throw new BatchTooLarge();
      finishes.push({ k: ref.key, v: ref.token, st: response.status, h: form.headers, b: base64(form.body!), kid: form.keyId });
      outcomes[index] = { kind: 'done' };
    }
    if (finishes.length === 0) return;
    const finishJson = JSON.stringify(finishes.map((f) => ({ s: scope, ...f })));
    const finished = (await ctx.db.queryOn(sql, ctx.sql.groupFinish, [finishJson])).rows;
    // Fenced (protocol.md K5): every claimed key must have been finished by its own token.
    if (finished.length !== finishes.length) throw new BatchFenced();
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
