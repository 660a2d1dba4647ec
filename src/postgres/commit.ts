/** The fenced commit (protocol.md K4, K5): an atomic phase or the finish, with or without local effects. */
import type { CommitRecord, Fenced, KeyRef } from '../store/types.js';
import type { BlobRef } from './blob-store.js';
import type { Queryable } from './client.js';
import type { StoreContext } from './context.js';
import { storedForm } from '../store/stored-form.js';

/** Sentinel thrown inside a transaction to roll it back when a fenced write matched no row. */
const FENCED = Symbol('idem.fenced');

/**
 * A commit without local effects. An out-of-line body needs a transaction for the row and its
 * blob; anything else is one autocommit statement.
 */
export async function commitRecord<Tx>(ctx: StoreContext<Tx>, ref: KeyRef, rec: CommitRecord): Promise<Fenced> {
  // Group commit (protocol.md K19): an inline finish shares one fenced statement with others.
  if (rec.kind === 'finish' && ctx.group?.batchFinishes && rec.response.body.length <= ctx.inlineMaxBytes) {
    const finished = await ctx.group.finish({ ref, status: rec.response.status, form: storedForm(ctx, ref, rec.response) });
    return finished ? { kind: 'ok', value: undefined } : { kind: 'fenced' };
  }
  if (rec.kind === 'phase' || rec.response.body.length <= ctx.inlineMaxBytes) {
    return (await write(ctx, undefined, ref, rec)) ? { kind: 'ok', value: undefined } : { kind: 'fenced' };
  }
  return commitWithEffects(
    ctx,
    ref,
    () => rec,
    async () => undefined,
  );
}

/**
 * Runs `effects` and writes `record(value)`, fenced, in one transaction; a stale token rolls
 * the effects back (`fenced`), a throw from `effects` rolls everything back and propagates.
 */
export async function commitWithEffects<Tx, T>(
  ctx: StoreContext<Tx>,
  ref: KeyRef,
  record: (value: T) => CommitRecord,
  effects: (tx: Tx) => Promise<T>,
): Promise<Fenced<T>> {
  let external: BlobRef | undefined; // an external blob written by this commit, not yet committed
  try {
    // `tx` is the client's own transaction (the user's effects), `sql` idem's handle in it.
    const value = await ctx.db.clientTransaction(async (tx, sql) => {
      const value = await effects(tx);
      // The fenced write comes last (protocol.md Q4): zero rows means another worker took
      // the key over while the effects ran; throwing rolls the effects back with it.
      if (!(await write(ctx, sql, ref, record(value), (blob) => (external = blob)))) throw FENCED;
      return value;
    });
    return { kind: 'ok', value };
  } catch (error) {
    // The row does not point at an external blob written for it: delete the blob now.
    if (external) await ctx.blobs.delete([external]).catch(() => undefined);
    if (error === FENCED) return { kind: 'fenced' };
    throw error;
  }
}

/**
 * The fenced write of a commit, on `tx` inside a transaction or on its own (autocommit; never
 * for an out-of-line body). An out-of-line body is put after the fenced UPDATE matched, before
 * COMMIT; `onExternalBlob` learns of a blob written outside the transaction.
 * @returns false when fenced (no row matched the token)
 */
async function write<Tx>(
  ctx: StoreContext<Tx>,
  tx: Queryable | undefined,
  ref: KeyRef,
  rec: CommitRecord,
  onExternalBlob?: (blob: BlobRef) => void,
): Promise<boolean> {
  const run = (text: string, params: unknown[]) => (tx ? ctx.db.queryOn(tx, text, params) : ctx.db.query(text, params));
  if (rec.kind === 'phase') {
    const result = await run(ctx.sql.recordPhase, [ref.scope, ref.key, ref.token, rec.phase, JSON.stringify(rec.result ?? null), rec.leaseMs]);
    return result.rows.length > 0;
  }
  const form = storedForm(ctx, ref, rec.response);
  const result = await run(ctx.sql.finish, [
    ref.scope,
    ref.key,
    ref.token,
    rec.response.status,
    form.headers,
    form.body,
    form.blob?.ref.id ?? null,
    form.keyId,
  ]);
  if (result.rows.length === 0) return false;
  if (form.blob) {
    if (!tx) throw new Error('idem/postgres: an out-of-line body is written inside a transaction');
    if (!ctx.blobs.transactional) onExternalBlob?.(form.blob.ref);
    await ctx.blobs.put(form.blob.ref, form.blob.body, tx);
  }
  return true;
}
