import { randomUUID } from 'node:crypto';
import { aesGcmCipher, type EncryptionOptions, type ResponseCipher, responseAad } from '../core/cipher.js';
import { DEFAULT_RETENTION_MS, KeyState } from '../core/constants.js';
import { sameFingerprint } from '../core/fingerprint.js';
import { InvalidOptionError, ResponseUnreadableError, UnknownKeyIdError } from '../core/errors.js';
import type {
  ClaimInput,
  ClaimResult,
  CommitRecord,
  Fenced,
  IdempotencyStore,
  KeyRecord,
  KeyRef,
  PhaseResults,
  StoredResponse,
  TakeOverResult,
} from '../store/types.js';
import { affectedRows, type Queryable, type SqlClient, type SqlExecutor, toExecutor } from './client.js';
import { type Statements, statements } from './sql.js';
import { type BlobRef, type BlobStore, TableBlobStore } from './blob-store.js';

/**
 * Bodies above 64 KiB go out of line by default. Below it, one statement claims or replays
 * (the body comes back with the row). Above it, the conflict path (409, 422, the claim's own
 * read) would otherwise carry the whole body on every retry of a key still in progress or
 * reused, and the keys table's TOAST would grow with the largest responses; one extra round
 * trip on replay of a large body costs little next to sending it. Most JSON API responses are
 * a few KiB, so they stay inline.
 */
export const DEFAULT_INLINE_MAX_BYTES = 64 * 1024;

/** Options of {@link PostgresStore}. */
export interface PostgresStoreOptions {
  /** A `pg.Pool` or a PGlite instance. */
  client: SqlClient;
  /**
   * Table name, optionally schema-qualified.
   * @default 'idempotency_keys'
   */
  table?: string;
  /**
   * Response bodies longer than this many bytes (before encryption) are stored out of line in
   * `blobStore` and the row keeps a pointer; `Infinity` keeps every body inline.
   * @default 65_536 (64 KiB, see {@link DEFAULT_INLINE_MAX_BYTES})
   */
  inlineMaxBytes?: number;
  /**
   * Where out-of-line bodies live.
   * @default the table `<table>_blobs` in the same database, written in the finish's transaction
   */
  blobStore?: BlobStore;
  /**
   * Encryption at rest of stored response bodies and headers: AES-256-GCM keys by key id and
   * the current key id (see `aesGcmCipher`), or any {@link ResponseCipher}. Off by default.
   * Rows written before it was turned on still replay (plaintext).
   */
  encryption?: EncryptionOptions | ResponseCipher;
}

/** Options of {@link PostgresStore.sweep}. */
export interface SweepOptions {
  /** Rows older than this (ms since creation) are deleted. @default 86_400_000 (24 h) */
  retentionMs?: number;
  /** Rows per DELETE; small batches keep locks and WAL bursts short. @default 1000 */
  batchSize?: number;
  /** Stop starting new batches after this many ms. @default Infinity */
  maxDurationMs?: number;
}

/** Sentinel thrown inside a transaction to roll it back when a fenced write matched no row. */
const FENCED = Symbol('idem.fenced');

/** A response as written to the row: sealed when encryption is on, body inline or out of line. */
interface StoredForm {
  headers: string;
  body: Uint8Array | null;
  blob: { ref: BlobRef; body: Uint8Array } | undefined;
  keyId: string | null;
}

/**
 * The PostgreSQL store: one row per (scope, key) in `idempotency_keys` (seed, "Code").
 * Works on `pg.Pool` and PGlite. The transaction handle given to local effects is a
 * {@link Queryable} on the same connection as the fenced write.
 *
 * @example
 * ```ts
 * const store = new PostgresStore({ client: new pg.Pool({ connectionString }) });
 * await store.migrate();
 * ```
 */
export class PostgresStore implements IdempotencyStore<Queryable> {
  readonly table: string;
  private readonly db: SqlExecutor;
  private readonly sql: Statements;
  private readonly inlineMaxBytes: number;
  private readonly blobs: BlobStore;
  private readonly cipher: ResponseCipher | undefined;

  /**
   * @throws {TypeError} for a client that is neither a pg.Pool nor PGlite
   * @throws {InvalidOptionError} for a bad table name, a negative `inlineMaxBytes`, or bad encryption keys
   */
  constructor(options: PostgresStoreOptions) {
    this.db = toExecutor(options.client);
    this.table = options.table ?? 'idempotency_keys';
    try {
      this.sql = statements(this.table);
    } catch (error) {
      throw new InvalidOptionError((error as Error).message);
    }
    this.inlineMaxBytes = options.inlineMaxBytes ?? DEFAULT_INLINE_MAX_BYTES;
    if (!(this.inlineMaxBytes >= 0)) throw new InvalidOptionError('idem/postgres: inlineMaxBytes must be a number of bytes >= 0');
    this.blobs = options.blobStore ?? new TableBlobStore(this.db, this.sql);
    const enc = options.encryption;
    this.cipher = enc === undefined ? undefined : 'seal' in enc ? enc : aesGcmCipher(enc);
  }

  /** Creates the table and its index if missing. Idempotent; safe to run from several hosts at once. */
  async migrate(): Promise<void> {
    const [lock, ...ddl] = this.sql.migrate;
    await this.db.transaction(async (tx) => {
      await this.db.queryOn(tx, lock!, [this.table]);
      for (const statement of ddl) await this.db.queryOn(tx, statement);
    });
  }

  async claim(input: ClaimInput): Promise<ClaimResult> {
    // Replay fast path: a finished key within retention is answered by one plain read. A
    // finished row only ever changes by being deleted or replaced past retention, so the
    // answer cannot be stale in a way that matters; every other case claims below.
    const finished = (await this.db.query(this.sql.readFinished, [input.scope, input.key, input.retentionMs])).rows[0];
    if (finished && finished.state === KeyState.Done && finished.retention_expired !== true) {
      return { outcome: 'exists', record: await this.toRecord(finished, input.scope, input.key, input.fingerprint) };
    }
    // Bounded: each turn either claims, finds a live row, or loses a race to a writer that
    // made progress (a replacement or a deletion), which cannot repeat without bound.
    for (let attempt = 0; attempt < 5; attempt++) {
      const { rows } = await this.db.query(this.sql.claim, [
        input.scope,
        input.key,
        input.fingerprint,
        input.leaseMs,
        input.retentionMs,
      ]);
      let row = rows[0];
      if (row?.outcome === 'claimed') return { outcome: 'claimed', token: Number(row.lock_version), claimId: String(row.claim_id) };
      if (!row) {
        // Lost the race to a concurrent claim committed after our snapshot: read it fresh.
        row = (await this.db.query(this.sql.readForUpdate, [input.scope, input.key, input.retentionMs])).rows[0];
        if (!row) continue; // deleted in between (discarded or swept): claim again
      }
      // Past retention the row counts as absent, unless its lease is still valid: its worker
      // is alive, so the row is reported as it is (in progress) instead of being replaced.
      if (row.retention_expired === true && row.lease_expired === true) {
        const replaced = await this.db.query(this.sql.replaceExpired, [
          input.scope,
          input.key,
          input.fingerprint,
          input.leaseMs,
          input.retentionMs,
          row.lock_version,
        ]);
        const won = replaced.rows[0];
        if (won) {
          // The replaced response's blob is dead: delete it now rather than keep a response
          // past retention (best effort: a sweep of the row deletes it too).
          if (row.response_body_ref) await this.blobs.delete([blobRef(row, input.scope, input.key)]).catch(() => undefined);
          return { outcome: 'claimed', token: Number(won.lock_version), claimId: String(won.claim_id) };
        }
        continue;
      }
      return { outcome: 'exists', record: await this.toRecord(row, input.scope, input.key, input.fingerprint) };
    }
    throw new Error('idem/postgres: claim did not settle after 5 attempts');
  }

  async takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult> {
    const { rows } = await this.db.query(this.sql.takeOver, [ref.scope, ref.key, ref.token, leaseMs]);
    const row = rows[0];
    if (!row) return { outcome: 'lost' };
    return {
      outcome: 'taken',
      token: Number(row.lock_version),
      claimId: String(row.claim_id),
      recoveryPoint: String(row.recovery_point),
      phaseResults: (row.phase_results ?? {}) as PhaseResults,
    };
  }

  async commit<T>(
    ref: KeyRef,
    record: (value: T) => CommitRecord,
    effects?: (tx: Queryable) => Promise<T>,
  ): Promise<Fenced<T>> {
    if (!effects) {
      const value = undefined as T;
      const rec = record(value);
      // An out-of-line body needs a transaction for the row and its blob; anything else is one
      // autocommit statement.
      if (rec.kind === 'phase' || rec.response.body.length <= this.inlineMaxBytes) {
        return (await this.write(undefined, ref, rec)) ? { outcome: 'ok', value } : { outcome: 'fenced' };
      }
      effects = async () => value;
      record = () => rec;
    }
    const run = effects;
    let external: BlobRef | undefined; // an external blob written by this commit, not yet committed
    try {
      const value = await this.db.transaction(async (tx) => {
        const value = await run(tx);
        // The fenced write comes last (seed statement 4): zero rows means another worker took
        // the key over while the effects ran; throwing rolls the effects back with it.
        const rec = record(value);
        if (!(await this.write(tx, ref, rec, (blob) => (external = blob)))) throw FENCED;
        return value;
      });
      return { outcome: 'ok', value };
    } catch (error) {
      // The row does not point at an external blob written for it: delete the blob now.
      if (external) await this.blobs.delete([external]).catch(() => undefined);
      if (error === FENCED) return { outcome: 'fenced' };
      throw error;
    }
  }

  /**
   * The fenced write of a commit, on `tx` inside a transaction or on its own (autocommit; never
   * for an out-of-line body). An out-of-line body is put after the fenced UPDATE matched, before
   * COMMIT; `onExternalBlob` learns of a blob written outside the transaction.
   */
  private async write(tx: Queryable | undefined, ref: KeyRef, rec: CommitRecord, onExternalBlob?: (blob: BlobRef) => void): Promise<boolean> {
    const run = (text: string, params: unknown[]) => (tx ? this.db.queryOn(tx, text, params) : this.db.query(text, params));
    if (rec.kind === 'phase') {
      const result = await run(this.sql.recordPhase, [
        ref.scope,
        ref.key,
        ref.token,
        rec.phase,
        JSON.stringify(rec.result ?? null),
        rec.leaseMs,
      ]);
      return result.rows.length > 0;
    }
    const form = this.storedForm(ref, rec.response);
    const result = await run(this.sql.finish, [
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
      if (!this.blobs.transactional) onExternalBlob?.(form.blob.ref);
      await this.blobs.put(form.blob.ref, form.blob.body, tx);
    }
    return true;
  }

  /** Seals the response when encryption is on and decides inline or out of line (by the plaintext length). */
  private storedForm(ref: KeyRef, response: StoredResponse): StoredForm {
    const outOfLine = response.body.length > this.inlineMaxBytes;
    const headersJson = JSON.stringify(response.headers);
    let headers = headersJson;
    let body = response.body;
    if (this.cipher) {
      const sealed = this.cipher.seal(new TextEncoder().encode(headersJson), responseAad(ref.scope, ref.key, 'headers'));
      headers = JSON.stringify(Buffer.from(sealed).toString('base64'));
      body = this.cipher.seal(response.body, responseAad(ref.scope, ref.key, 'body'));
    }
    return {
      headers,
      body: outOfLine ? null : body,
      blob: outOfLine ? { ref: { scope: ref.scope, key: ref.key, id: randomUUID() }, body } : undefined,
      keyId: this.cipher ? this.cipher.currentKeyId : null,
    };
  }

  /**
   * A row as a record; a finished row's response is read back exactly as it was written (its
   * blob fetched, its seal opened). With `requestFingerprint`, a response that will not be
   * replayed (another request under the key: a mismatch) is left out, neither fetched nor opened.
   * @throws {UnknownKeyIdError} sealed with a key id that is not configured
   * @throws {ResponseUnreadableError} tampered, sealed for another row, or its blob is missing
   */
  private async toRecord(row: Record<string, unknown>, scope: string, key: string, requestFingerprint?: Uint8Array): Promise<KeyRecord> {
    const record = toRecord(row, scope, key);
    if (!record.response) return record;
    if (requestFingerprint && !sameFingerprint(record.fingerprint, requestFingerprint)) {
      delete record.response;
      return record;
    }
    const keyId = row.response_key_id === null || row.response_key_id === undefined ? undefined : String(row.response_key_id);
    let body: Uint8Array | undefined = record.response.body;
    if (row.response_body_ref) {
      body = await this.blobs.get(blobRef(row, scope, key));
      if (body === undefined) throw new ResponseUnreadableError(`The out-of-line body of this stored response is missing (blob ${String(row.response_body_ref)})`);
      body = bytes(body);
    }
    if (keyId === undefined) {
      record.response.body = body;
      return record;
    }
    if (!this.cipher) throw new UnknownKeyIdError(keyId);
    const sealedHeaders = row.response_headers;
    if (typeof sealedHeaders !== 'string') throw new ResponseUnreadableError('The stored response is marked encrypted but its headers are not sealed');
    const headers = this.cipher.open(Buffer.from(sealedHeaders, 'base64'), responseAad(record.scope, record.key, 'headers'));
    record.response.headers = JSON.parse(new TextDecoder().decode(headers)) as Array<[string, string]>;
    record.response.body = this.cipher.open(body, responseAad(record.scope, record.key, 'body'));
    return record;
  }

  async extendLease(ref: KeyRef, leaseMs: number): Promise<Fenced> {
    const { rows } = await this.db.query(this.sql.extendLease, [ref.scope, ref.key, ref.token, leaseMs]);
    return rows.length > 0 ? { outcome: 'ok', value: undefined } : { outcome: 'fenced' };
  }

  async release(ref: KeyRef, options?: { discard?: boolean }): Promise<Fenced<'released' | 'deleted'>> {
    const params = [ref.scope, ref.key, ref.token];
    if (options?.discard) {
      const { rows } = await this.db.query(this.sql.discard, params);
      if (rows.length > 0) return { outcome: 'ok', value: 'deleted' };
    }
    const { rows } = await this.db.query(this.sql.release, params);
    return rows.length > 0 ? { outcome: 'ok', value: 'released' } : { outcome: 'fenced' };
  }

  async get(scope: string, key: string, retentionMs: number): Promise<KeyRecord | undefined> {
    const row = (await this.db.query(this.sql.read, [scope, key, retentionMs])).rows[0];
    if (!row || row.retention_expired === true) return undefined;
    return this.toRecord(row, scope, key);
  }

  /**
   * Deletes rows past retention in batches by primary key, oldest first, skipping rows that
   * are locked right now (seed step 6). Safe to run from several hosts at once.
   *
   * @returns the number of rows deleted
   */
  async sweep(options: SweepOptions = {}): Promise<number> {
    const retentionMs = options.retentionMs ?? DEFAULT_RETENTION_MS;
    const batchSize = options.batchSize ?? 1000;
    if (!(batchSize >= 1)) throw new InvalidOptionError('sweep: batchSize must be >= 1');
    const deadline = Date.now() + (options.maxDurationMs ?? Infinity);
    let deleted = 0;
    while (Date.now() < deadline) {
      const n = affectedRows(await this.db.query(this.sql.sweepBatch, [retentionMs, batchSize]));
      deleted += n;
      if (n < batchSize) break;
    }
    return deleted;
  }
}

function bytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (value === null || value === undefined) return new Uint8Array(0);
  throw new TypeError('idem/postgres: expected bytea as Uint8Array');
}

function blobRef(row: Record<string, unknown>, scope: string, key: string): BlobRef {
  return { scope, key, id: String(row.response_body_ref) };
}

/**
 * A row as a {@link KeyRecord}. `scope` and `key` are the ones the row was looked up by. A row
 * from `readFinished` has no lease columns: a finished row holds no lease (expired, 0 ms left).
 * The row object is only read, never extended: adding properties to the driver's row objects
 * measurably slowed the replay path (bench/).
 */
function toRecord(row: Record<string, unknown>, scope: string, key: string): KeyRecord {
  const state = row.state === KeyState.Done ? KeyState.Done : KeyState.Started;
  const record: KeyRecord = {
    scope,
    key,
    state,
    fingerprint: bytes(row.fingerprint),
    recoveryPoint: String(row.recovery_point),
    phaseResults: (row.phase_results ?? {}) as PhaseResults,
    token: Number(row.lock_version),
    claimId: String(row.claim_id),
    leaseExpired: row.lease_expired === undefined ? state === KeyState.Done : row.lease_expired === true,
    leaseRemainingMs: Number(row.lease_remaining_ms ?? 0),
    createdAt: row.created_at instanceof Date ? row.created_at : new Date(String(row.created_at)),
  };
  if (state === KeyState.Done) {
    const response: StoredResponse = {
      status: Number(row.response_status),
      headers: (row.response_headers ?? []) as Array<[string, string]>,
      body: bytes(row.response_body),
    };
    record.response = response;
  }
  return record;
}
