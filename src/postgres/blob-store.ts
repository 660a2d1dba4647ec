import type { BlobRef } from '../store/stored-form.js';
import type { Queryable, SqlExecutor } from './client.js';
import type { Statements } from './sql.js';

export type { BlobRef };

/**
 * Where response bodies larger than the store's `inlineMaxBytes` live; the row keeps only the
 * blob id. The default keeps them in `<table>_blobs` in the same database.
 *
 * Ordering: the store calls `put` inside the finish's transaction, after the fenced UPDATE
 * matched and before COMMIT. So a row never points at a blob that was not written.
 * - `transactional: true` (same database): `put` runs on `tx`, so a lost lease or a failed
 *   commit rolls the blob back too; deleting the row deletes the blob (foreign key).
 * - `transactional: false` (an external store such as S3): `put` is done before the commit,
 *   which may then fail or be fenced; the store then calls `delete` at once (best effort). A
 *   crash in between leaves an orphan, and swept rows leave their blobs: remove both with the
 *   external store's own expiry, at least the store's retention (e.g. an S3 lifecycle rule
 *   expiring objects after retention + 1 day). No blob is read after its row's retention.
 *
 * Bytes are opaque: when encryption is on, they are already sealed.
 */
export interface BlobStore {
  /** True when `put` runs on the commit's transaction handle (same database). */
  readonly transactional: boolean;
  /** Stores `body` under `ref`; `tx` is the finish's transaction (a {@link Queryable}). Throws on failure. */
  put(ref: BlobRef, body: Uint8Array, tx: Queryable): Promise<void>;
  /** The body stored under `ref`, or `undefined` when there is none. */
  get(ref: BlobRef): Promise<Uint8Array | undefined>;
  /** Deletes the blobs, ignoring those already gone. */
  delete(refs: BlobRef[]): Promise<void>;
}

/** The default {@link BlobStore}: the table `<table>_blobs` next to the keys table. */
export class TableBlobStore implements BlobStore {
  readonly transactional = true;
  constructor(
    private readonly db: SqlExecutor,
    private readonly sql: Pick<Statements, 'blobPut' | 'blobGet' | 'blobDelete'>,
  ) {}

  async put(ref: BlobRef, body: Uint8Array, tx: Queryable): Promise<void> {
    await this.db.queryOn(tx, this.sql.blobPut, [ref.scope, ref.key, ref.id, body]);
  }

  async get(ref: BlobRef): Promise<Uint8Array | undefined> {
    const row = (await this.db.query(this.sql.blobGet, [ref.scope, ref.key, ref.id])).rows[0];
    return row ? (row.body as Uint8Array) : undefined;
  }

  async delete(refs: BlobRef[]): Promise<void> {
    for (const ref of refs) await this.db.query(this.sql.blobDelete, [ref.scope, ref.key, ref.id]);
  }
}
