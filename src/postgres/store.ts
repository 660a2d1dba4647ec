import { randomUUID } from 'node:crypto';
import { aesGcmCipher, type EncryptionOptions, type ResponseCipher, responseAad } from '../core/cipher.js';
import { DEFAULT_RETENTION_MS, KeyState } from '../core/constants.js';
import { sameFingerprint } from '../core/fingerprint.js';
import { InvalidOptionError, ResponseUnreadableError, UnknownKeyIdError } from '../core/errors.js';
import type {
  AbandonedKey,
  ClaimInput,
  ClaimResult,
  CommitRecord,
  Fenced,
  IdempotencyStore,
  KeyRecord,
  KeyRef,
  PhaseResults,
  RequestSnapshot,
  StoredResponse,
  TakeOverResult,
} from '../store/types.js';
import { type Queryable, type SqlClient, type SqlExecutor, toExecutor } from './client.js';
import { type BlobRef, type BlobStore, TableBlobStore } from './blob-store.js';
import { type PartitionedStatements, partitionedStatements, type Statements, statements } from './sql.js';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

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
   * @default 65_536 (64 KiB, see {@link DEFAULT_INLINE_MAX_BYTES}); in partitioned mode without a
   * `blobStore`, `Infinity` (a partitioned table cannot be the target of the blob table's foreign key)
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
  /**
   * Partitioned mode: the table is range-partitioned by `created_at`, one partition per UTC
   * day, created ahead by {@link PostgresStore.maintain}, and {@link PostgresStore.sweep}
   * drops whole expired partitions. The claim then serialises on a per-key advisory lock,
   * since PostgreSQL cannot enforce (scope, key) uniqueness across partitions (see
   * `partitionedStatements` in sql.ts). `true` uses the defaults.
   * @default false (one plain table)
   */
  partitioned?: boolean | PartitionOptions;
}

/** Options of partitioned mode. */
export interface PartitionOptions {
  /**
   * Daily partitions kept ready ahead of today (UTC), besides today's and yesterday's, by
   * `migrate()` and `maintain()`. Run `maintain()` (or `idem partitions`) at least daily: a
   * claim on a day without a partition fails (the HTTP layer answers 503).
   * @default 7
   */
  daysAhead?: number;
  /**
   * How long a partition drop may wait for its locks, in ms; claims queue behind a waiting
   * drop, so keep it short. On timeout the partition is kept for the next sweep.
   * @default 1000
   */
  dropLockTimeoutMs?: number;
}

/** Progress of a sweep, reported after each batch (plain mode) or partition (partitioned mode). */
export interface SweepProgress {
  /** Rows deleted so far (in partitioned mode: rows in the dropped partitions). */
  deleted: number;
  /** Rows past the cutoff looked at so far, including those kept because their lease is valid. */
  scanned: number;
  /** DELETE statements run so far (plain mode). */
  batches: number;
  /** Partitions dropped so far (partitioned mode), by name. */
  droppedPartitions: string[];
}

/** Result of {@link PostgresStore.sweepReport}. */
export interface SweepReport extends SweepProgress {
  /** Rows created at or before this instant (database clock) were past retention. */
  cutoff: Date;
  /** True when `maxDurationMs` ended the sweep before it was done. */
  timedOut: boolean;
  /** Partitions past retention kept because a lease in them is valid or their lock timed out. */
  keptPartitions: string[];
  /** Elapsed ms. */
  durationMs: number;
}

/** What a sweep would find now; see {@link PostgresStore.sweepPlan}. */
export interface SweepPlan {
  cutoff: Date;
  /** Rows created at or before the cutoff. */
  expired: number;
  /** Of those, rows whose lease is not valid: what a sweep deletes. */
  sweepable: number;
  /** Partitioned mode: partitions whose whole day is at or before the cutoff. */
  expiredPartitions: string[];
}

/** One key as an operator sees it ({@link PostgresStore.inspect}). */
export interface KeyInspection {
  scope: string;
  key: string;
  state: string;
  /** SHA-256 fingerprint, hex. */
  fingerprint: string;
  recoveryPoint: string;
  phaseResults: PhaseResults;
  /** Fencing token. */
  lockVersion: string;
  claimId: string;
  lockedUntil: Date | null;
  leaseExpired: boolean;
  leaseRemainingMs: number;
  /**
   * The stored response, summarised: status, replayed headers (opened when sealed and the key
   * is configured; empty when it cannot be opened), body size in bytes as stored (ciphertext
   * when sealed), where the body lives, and the key id it was sealed with (null: plaintext).
   */
  response: {
    status: number;
    headers: Array<[string, string]>;
    bytes: number;
    storage: 'inline' | 'out-of-line';
    keyId: string | null;
  } | null;
  createdAt: Date;
  finishedAt: Date | null;
  retentionExpired: boolean;
}

/** Table health; see {@link PostgresStore.stats}. */
export interface StoreStats {
  total: number;
  started: number;
  done: number;
  oldest: Date | null;
  /** Past retention, lease not valid: the next sweep removes them. */
  expiredUnswept: number;
  /** Started, lease over, within retention: abandoned work the next retry (or a completer) takes over. */
  abandoned: number;
  liveLeases: number;
  /** Partitioned mode: partition names by day. */
  partitions?: Array<{ name: string; day: string; expired: boolean }>;
}

/** Options of {@link PostgresStore.sweep}. */
export interface SweepOptions {
  /** Rows older than this (ms since creation) are deleted. @default 86_400_000 (24 h) */
  retentionMs?: number;
  /** Rows per DELETE; small batches keep locks and WAL bursts short. @default 1000 */
  batchSize?: number;
  /** Stop starting new batches after this many ms. @default Infinity */
  maxDurationMs?: number;
  /** Called after each batch (or dropped partition) with the totals so far. */
  onProgress?: (progress: SweepProgress) => void;
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
  /** Partitioned mode's options, or undefined for a plain table. */
  readonly partitioning: Required<PartitionOptions> | undefined;
  private readonly db: SqlExecutor;
  private readonly sql: Statements;
  private readonly inlineMaxBytes: number;
  private readonly blobs: BlobStore;
  private readonly cipher: ResponseCipher | undefined;
  private readonly psql: PartitionedStatements | undefined;

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
    // Partitioned mode drops whole partitions, and a foreign key cannot reference (scope, key)
    // on a partitioned table (its unique keys include created_at), so the default table blob
    // store has nothing to cascade from: bodies stay inline unless an external blob store,
    // whose own expiry cleans up, is given.
    if (options.partitioned && options.blobStore === undefined && options.inlineMaxBytes !== undefined && options.inlineMaxBytes !== Infinity) {
      throw new InvalidOptionError(
        'idem/postgres: partitioned mode keeps bodies inline unless you pass a blobStore (with an expiry rule of retention + 1 day); drop inlineMaxBytes or add blobStore',
      );
    }
    this.inlineMaxBytes = options.inlineMaxBytes ?? (options.partitioned && !options.blobStore ? Infinity : DEFAULT_INLINE_MAX_BYTES);
    if (!(this.inlineMaxBytes >= 0)) throw new InvalidOptionError('idem/postgres: inlineMaxBytes must be a number of bytes >= 0');
    this.blobs = options.blobStore ?? new TableBlobStore(this.db, this.sql);
    const enc = options.encryption;
    this.cipher = enc === undefined ? undefined : 'seal' in enc ? enc : aesGcmCipher(enc);
    if (options.partitioned) {
      const p = options.partitioned === true ? {} : options.partitioned;
      this.partitioning = { daysAhead: p.daysAhead ?? 7, dropLockTimeoutMs: p.dropLockTimeoutMs ?? 1000 };
      if (!Number.isInteger(this.partitioning.daysAhead) || this.partitioning.daysAhead < 1) {
        throw new InvalidOptionError('partitioned.daysAhead must be an integer >= 1');
      }
      if (!(this.partitioning.dropLockTimeoutMs >= 1)) throw new InvalidOptionError('partitioned.dropLockTimeoutMs must be >= 1');
      this.psql = partitionedStatements(this.table);
    }
  }

  /**
   * Creates the table, its index and token sequence if missing, and upgrades a table made by
   * an earlier version; in partitioned mode also the partitions from yesterday to `daysAhead`
   * days ahead. Idempotent; safe to run from several hosts at once.
   *
   * @returns what it did: `created` (new table), `exists`, plus partitions created
   * @throws {InvalidOptionError} when the table exists in the other mode (plain vs partitioned)
   */
  async migrate(): Promise<{ table: 'created' | 'exists'; partitionsCreated: string[] }> {
    const [lock, ...ddl] = (this.psql ?? this.sql).migrate;
    const table = await this.db.transaction(async (tx) => {
      await this.db.queryOn(tx, lock!, [this.table]);
      const kind = (await this.db.queryOn(tx, this.sql.tableKind, [this.table])).rows[0]?.kind;
      if (kind !== undefined) this.checkKind(String(kind));
      for (const statement of ddl) await this.db.queryOn(tx, statement);
      return kind === undefined ? ('created' as const) : ('exists' as const);
    });
    const partitionsCreated = this.psql ? await this.maintain() : [];
    return { table, partitionsCreated };
  }

  /** The table as it exists now: `plain`, `partitioned`, or undefined when it does not exist (not migrated). */
  async tableMode(): Promise<'plain' | 'partitioned' | undefined> {
    const kind = (await this.db.query(this.sql.tableKind, [this.table])).rows[0]?.kind;
    return kind === undefined ? undefined : kind === 'p' ? 'partitioned' : 'plain';
  }

  private checkKind(kind: string): void {
    if (this.psql && kind !== 'p') {
      throw new InvalidOptionError(
        `Table ${this.table} exists and is not partitioned: migrate it first (README, "Partitioned mode"), or drop the partitioned option`,
      );
    }
    if (!this.psql && kind === 'p') {
      throw new InvalidOptionError(`Table ${this.table} is partitioned: open the store with { partitioned: true }`);
    }
  }

  /**
   * Partitioned mode: creates the daily partitions from yesterday (UTC, database clock) to
   * `daysAhead` days ahead that are missing. Idempotent; run it at least daily (cron, or
   * `idem partitions`); `sweep()` drops the expired ones.
   *
   * @returns the names of the partitions created
   * @throws {InvalidOptionError} on a plain-table store
   */
  async maintain(): Promise<string[]> {
    const psql = this.requirePartitioned('maintain');
    const today = String((await this.db.query(psql.today)).rows[0]!.day);
    const existing = new Set((await this.db.query(psql.listPartitions, [this.table, 0])).rows.map((r) => String(r.name)));
    const created: string[] = [];
    for (let offset = -1; offset <= this.partitioning!.daysAhead; offset++) {
      const day = addDays(today, offset);
      const name = this.partitionName(day);
      if (existing.has(name)) continue;
      await this.db.transaction(async (tx) => {
        await this.db.queryOn(tx, this.sql.migrate[0]!, [this.table]); // one maintainer at a time
        await this.db.queryOn(tx, psql.createPartition(name, day, addDays(day, 1)));
      });
      created.push(name);
    }
    return created;
  }

  /** `<table>_pYYYYMMDD`, without schema (the partition lives in the table's schema). */
  private partitionName(day: string): string {
    return `${this.table.split('.').pop()!}_p${day.replaceAll('-', '')}`;
  }

  private requirePartitioned(what: string): PartitionedStatements {
    if (!this.psql) throw new InvalidOptionError(`${what}: the store is not partitioned (option partitioned)`);
    return this.psql;
  }

  async claim(input: ClaimInput): Promise<ClaimResult> {
    // Replay fast path: a finished key within retention is answered by one plain read. A
    // finished row only ever changes by being deleted or replaced past retention, so the
    // answer cannot be stale in a way that matters; every other case claims below.
    const finished = (await this.db.query(this.sql.readFinished, [input.scope, input.key, input.retentionMs])).rows[0];
    if (finished && finished.state === KeyState.Done && finished.retention_expired !== true) {
      return { outcome: 'exists', record: await this.toRecord(finished, input.scope, input.key, input.fingerprint) };
    }
    if (this.psql) return this.claimPartitioned(this.psql, input);
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

  /**
   * The claim in partitioned mode: one transaction holding the key's advisory lock, in which
   * the lookup across partitions and the insert (or the replacement of a row past retention)
   * cannot interleave with another claim of the key. See `partitionedStatements` in sql.ts.
   */
  private async claimPartitioned(psql: PartitionedStatements, input: ClaimInput): Promise<ClaimResult> {
    const params = [input.scope, input.key, input.fingerprint, input.leaseMs, input.retentionMs];
    try {
      return await this.db.transaction(async (tx): Promise<ClaimResult> => {
        await this.db.queryOn(tx, psql.lockKey, [input.scope, input.key]);
        const row = (await this.db.queryOn(tx, psql.claim, params)).rows[0]!;
        if (row.outcome === 'claimed') return { outcome: 'claimed', token: Number(row.lock_version), claimId: String(row.claim_id) };
        if (row.retention_expired === true && row.lease_expired === true) {
          const won = (await this.db.queryOn(tx, psql.replaceExpired, [...params, row.lock_version])).rows[0];
          if (won) return { outcome: 'claimed', token: Number(won.lock_version), claimId: String(won.claim_id) };
          // A takeover or heartbeat (not a claim: those wait for the lock) changed the row in
          // between: report it as it is now.
          const now = (await this.db.queryOn(tx, this.sql.read, [input.scope, input.key, input.retentionMs])).rows[0];
          if (now) return { outcome: 'exists', record: await this.toRecord(now, input.scope, input.key, input.fingerprint) };
          throw new Error('idem/postgres: a key row vanished during its partitioned claim');
        }
        return { outcome: 'exists', record: await this.toRecord(row, input.scope, input.key, input.fingerprint) };
      });
    } catch (error) {
      if ((error as { code?: string }).code === '23514') {
        throw new Error(
          `idem/postgres: no partition of ${this.table} for today (UTC): run store.maintain() or \`idem partitions\` at least daily`,
          { cause: error },
        );
      }
      throw error;
    }
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
      const sealed = this.cipher.seal(encoder.encode(headersJson), responseAad(ref.scope, ref.key, 'headers'));
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
    record.response.headers = this.openHeaders(this.cipher, sealedHeaders, record.scope, record.key);
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

  async saveRequest(ref: KeyRef, request: RequestSnapshot): Promise<Fenced> {
    const snapshot = JSON.stringify({
      method: request.method,
      url: request.url,
      contentType: request.contentType,
      body: request.body ? Buffer.from(request.body.buffer, request.body.byteOffset, request.body.byteLength).toString('base64') : null,
    });
    const { rows } = await this.db.query(this.sql.saveRequest, [ref.scope, ref.key, ref.token, snapshot]);
    return rows.length > 0 ? { outcome: 'ok', value: undefined } : { outcome: 'fenced' };
  }

  async discardAbandoned(ref: KeyRef): Promise<Fenced> {
    const { rows } = await this.db.query(this.sql.discardAbandoned, [ref.scope, ref.key, ref.token]);
    return rows.length > 0 ? { outcome: 'ok', value: undefined } : { outcome: 'fenced' };
  }

  async listAbandoned(options: { limit: number; graceMs: number; retentionMs: number }): Promise<AbandonedKey[]> {
    const { rows } = await this.db.query(this.sql.listAbandoned, [Math.max(0, Math.floor(options.graceMs)), options.retentionMs, options.limit]);
    return rows.map((row) => {
      const abandoned: AbandonedKey = { record: toRecord(row, String(row.scope), String(row.key)) };
      const request = toSnapshot(row.request);
      if (request) abandoned.request = request;
      return abandoned;
    });
  }

  /**
   * Deletes rows past retention (seed step 6): rows created at or before `now() - retentionMs`
   * (database clock, fixed when the sweep starts) whose lease is not valid. A plain table is
   * swept in batches by key range, oldest first, skipping rows locked right now; a partitioned
   * one by dropping each partition whose whole day is past retention (one statement each,
   * kept while a lease in it is valid). Safe to run from several hosts at once: no row is
   * deleted twice and no sweeper waits on a live claim.
   *
   * @returns the number of rows deleted
   * @throws {InvalidOptionError} for a batch size below 1
   */
  async sweep(options: SweepOptions = {}): Promise<number> {
    return (await this.sweepReport(options)).deleted;
  }

  /** {@link sweep} with the full report: cutoff, batches, partitions dropped and kept, time. */
  async sweepReport(options: SweepOptions = {}): Promise<SweepReport> {
    const retentionMs = options.retentionMs ?? DEFAULT_RETENTION_MS;
    const batchSize = options.batchSize ?? 1000;
    if (!(Number.isInteger(batchSize) && batchSize >= 1)) throw new InvalidOptionError('sweep: batchSize must be an integer >= 1');
    if (!(retentionMs >= 0)) throw new InvalidOptionError('sweep: retentionMs must be >= 0');
    const started = Date.now();
    const deadline = started + (options.maxDurationMs ?? Infinity);
    const cutoffUs = String((await this.db.query(this.sql.sweepCutoff, [retentionMs])).rows[0]!.cutoff_us);
    const progress: SweepProgress = { deleted: 0, scanned: 0, batches: 0, droppedPartitions: [] };
    const report = (timedOut: boolean, keptPartitions: string[] = []): SweepReport => ({
      ...progress,
      cutoff: new Date(Number(BigInt(cutoffUs) / 1000n)),
      timedOut,
      keptPartitions,
      durationMs: Date.now() - started,
    });
    if (this.psql) {
      const kept: string[] = [];
      for (const part of await this.expiredPartitions(retentionMs)) {
        if (Date.now() >= deadline) return report(true, kept);
        const dropped = await this.dropPartition(this.psql, part);
        if (dropped === undefined) kept.push(part);
        else {
          progress.deleted += dropped;
          progress.scanned += dropped;
          progress.droppedPartitions.push(part);
          options.onProgress?.({ ...progress, droppedPartitions: [...progress.droppedPartitions] });
        }
      }
      return report(false, kept);
    }
    // Cursor (created_at µs, scope, key): starts before any row (year 1653), moves after each batch.
    let cursor: [string, string, string] = ['-10000000000000000', '', ''];
    while (Date.now() < deadline) {
      const row = (await this.db.query(this.sql.sweepBatch, [cutoffUs, ...cursor, batchSize])).rows[0]!;
      progress.batches++;
      progress.deleted += Number(row.deleted);
      progress.scanned += Number(row.scanned);
      options.onProgress?.({ ...progress });
      if (row.created_us === null || row.created_us === undefined || Number(row.scanned) < batchSize) return report(false);
      cursor = [String(row.created_us), String(row.scope), String(row.key)];
    }
    return report(true);
  }

  /**
   * What a sweep would delete now, without deleting (dry run).
   * @param retentionMs @default 86_400_000 (24 h)
   */
  async sweepPlan(retentionMs: number = DEFAULT_RETENTION_MS): Promise<SweepPlan> {
    const cutoffUs = String((await this.db.query(this.sql.sweepCutoff, [retentionMs])).rows[0]!.cutoff_us);
    const row = (await this.db.query(this.sql.sweepPlan, [cutoffUs])).rows[0]!;
    return {
      cutoff: new Date(Number(BigInt(cutoffUs) / 1000n)),
      expired: Number(row.expired),
      sweepable: Number(row.sweepable),
      expiredPartitions: this.psql ? await this.expiredPartitions(retentionMs) : [],
    };
  }

  private async expiredPartitions(retentionMs: number): Promise<string[]> {
    const rows = (await this.db.query(this.requirePartitioned('sweep').listPartitions, [this.table, retentionMs])).rows;
    return rows.filter((r) => r.expired === true).map((r) => String(r.name));
  }

  /**
   * Drops one expired partition in its own transaction: lock it against writes (bounded by
   * the lock timeout), keep it if a lease in it is still valid, else DROP it.
   *
   * @returns the rows it held, or undefined when it was kept
   */
  private async dropPartition(psql: PartitionedStatements, name: string): Promise<number | undefined> {
    try {
      return await this.db.transaction(async (tx) => {
        await this.db.queryOn(tx, psql.setLockTimeout, [`${this.partitioning!.dropLockTimeoutMs}ms`]);
        await this.db.queryOn(tx, psql.lockPartition(name));
        const counted = (await this.db.queryOn(tx, psql.partitionRows(name))).rows[0]!;
        if (Number(counted.live) > 0) return undefined;
        await this.db.queryOn(tx, psql.dropPartition(name));
        return Number(counted.n);
      });
    } catch (error) {
      // 55P03 lock_not_available: busy; 42P01: another sweeper dropped it first.
      const code = (error as { code?: string }).code;
      if (code === '55P03' || code === '42P01') return undefined;
      throw error;
    }
  }

  /**
   * Everything stored about one key, past retention or not (`idem inspect`); the response is
   * summarised (status, headers, body size).
   * @param retentionMs only to report `retentionExpired` @default 86_400_000 (24 h)
   */
  /**
   * The replayed headers of a sealed response: base64 of the sealed JSON pairs, bound to
   * (scope, key) by the AAD.
   * @throws {ResponseUnreadableError} wrong key, tampered, or sealed for another row
   */
  private openHeaders(cipher: ResponseCipher, sealed: string, scope: string, key: string): Array<[string, string]> {
    const plain = cipher.open(Buffer.from(sealed, 'base64'), responseAad(scope, key, 'headers'));
    return JSON.parse(decoder.decode(plain)) as Array<[string, string]>;
  }

  /** The response summary of {@link inspect}: never the body, and never an error for a row it cannot open. */
  private async inspectResponse(row: Record<string, unknown>, scope: string, key: string): Promise<NonNullable<KeyInspection['response']>> {
    const keyId = row.response_key_id === null || row.response_key_id === undefined ? null : String(row.response_key_id);
    const outOfLine = row.response_body_ref !== null && row.response_body_ref !== undefined;
    let headers: Array<[string, string]> = [];
    if (keyId === null) headers = (row.response_headers ?? []) as Array<[string, string]>;
    else if (this.cipher && typeof row.response_headers === 'string') {
      try {
        headers = this.openHeaders(this.cipher, row.response_headers, scope, key);
      } catch {
        headers = [];
      }
    }
    let bytes = Number(row.response_bytes ?? 0);
    if (outOfLine) bytes = (await this.blobs.get(blobRef(row, scope, key)).catch(() => undefined))?.length ?? 0;
    return { status: Number(row.response_status), headers, bytes, storage: outOfLine ? 'out-of-line' : 'inline', keyId };
  }

  async inspect(scope: string, key: string, retentionMs: number = DEFAULT_RETENTION_MS): Promise<KeyInspection | undefined> {
    const row = (await this.db.query(this.sql.inspect, [scope, key, retentionMs])).rows[0];
    if (!row) return undefined;
    const date = (v: unknown) => (v === null || v === undefined ? null : v instanceof Date ? v : new Date(String(v)));
    return {
      scope: String(row.scope),
      key: String(row.key),
      state: String(row.state),
      fingerprint: String(row.fingerprint),
      recoveryPoint: String(row.recovery_point),
      phaseResults: (row.phase_results ?? {}) as PhaseResults,
      lockVersion: String(row.lock_version),
      claimId: String(row.claim_id),
      lockedUntil: date(row.locked_until),
      leaseExpired: row.lease_expired === true,
      leaseRemainingMs: Number(row.lease_remaining_ms ?? 0),
      response: row.response_status === null || row.response_status === undefined ? null : await this.inspectResponse(row, scope, key),
      createdAt: date(row.created_at)!,
      finishedAt: date(row.finished_at),
      retentionExpired: row.retention_expired === true,
    };
  }

  /**
   * Table health (`idem stats`): rows by state, oldest row, rows past retention not yet swept,
   * abandoned keys (lease over, within retention), live leases; partitions in partitioned mode.
   * @param retentionMs @default 86_400_000 (24 h)
   */
  async stats(retentionMs: number = DEFAULT_RETENTION_MS): Promise<StoreStats> {
    const row = (await this.db.query(this.sql.stats, [retentionMs])).rows[0]!;
    const stats: StoreStats = {
      total: Number(row.total),
      started: Number(row.started),
      done: Number(row.done),
      oldest: row.oldest === null || row.oldest === undefined ? null : new Date(row.oldest as string | Date),
      expiredUnswept: Number(row.expired_unswept),
      abandoned: Number(row.abandoned),
      liveLeases: Number(row.live_leases),
    };
    if (this.psql) {
      stats.partitions = (await this.db.query(this.psql.listPartitions, [this.table, retentionMs])).rows.map((r) => ({
        name: String(r.name),
        day: String(r.day),
        expired: r.expired === true,
      }));
    }
    return stats;
  }
}

/** `day` (YYYY-MM-DD) plus `n` days, as YYYY-MM-DD (UTC calendar arithmetic). */
function addDays(day: string, n: number): string {
  const d = new Date(`${day}T00:00:00Z`);
  d.setUTCDate(d.getUTCDate() + n);
  return d.toISOString().slice(0, 10);
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

/** The stored request snapshot (jsonb, body in base64), or undefined when none was stored. */
function toSnapshot(value: unknown): RequestSnapshot | undefined {
  if (!value || typeof value !== 'object') return undefined;
  const v = value as { method?: unknown; url?: unknown; contentType?: unknown; body?: unknown };
  if (typeof v.method !== 'string' || typeof v.url !== 'string') return undefined;
  return {
    method: v.method,
    url: v.url,
    contentType: typeof v.contentType === 'string' ? v.contentType : null,
    body: typeof v.body === 'string' ? new Uint8Array(Buffer.from(v.body, 'base64')) : null,
  };
}
