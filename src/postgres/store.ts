import { DEFAULT_RETENTION_MS, KeyState } from '../core/constants.js';
import { InvalidOptionError } from '../core/errors.js';
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
import { affectedRows, type Queryable, type SqlClient, type SqlExecutor, toExecutor } from './client.js';
import { type Statements, statements } from './sql.js';

/** Options of {@link PostgresStore}. */
export interface PostgresStoreOptions {
  /** A `pg.Pool` or a PGlite instance. */
  client: SqlClient;
  /**
   * Table name, optionally schema-qualified.
   * @default 'idempotency_keys'
   */
  table?: string;
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

  /** @throws {TypeError} for a client that is neither a pg.Pool nor PGlite; {@link InvalidOptionError} for a bad table name. */
  constructor(options: PostgresStoreOptions) {
    this.db = toExecutor(options.client);
    this.table = options.table ?? 'idempotency_keys';
    try {
      this.sql = statements(this.table);
    } catch (error) {
      throw new InvalidOptionError((error as Error).message);
    }
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
        if (won) return { outcome: 'claimed', token: Number(won.lock_version), claimId: String(won.claim_id) };
        continue;
      }
      return { outcome: 'exists', record: toRecord(row) };
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
      return (await this.write(undefined, ref, record(value))) ? { outcome: 'ok', value } : { outcome: 'fenced' };
    }
    try {
      const value = await this.db.transaction(async (tx) => {
        const value = await effects(tx);
        // The fenced write comes last (seed statement 4): zero rows means another worker took
        // the key over while the effects ran; throwing rolls the effects back with it.
        if (!(await this.write(tx, ref, record(value)))) throw FENCED;
        return value;
      });
      return { outcome: 'ok', value };
    } catch (error) {
      if (error === FENCED) return { outcome: 'fenced' };
      throw error;
    }
  }

  /** The fenced write of a commit, on `tx` inside a transaction or on its own (autocommit). */
  private async write(tx: Queryable | undefined, ref: KeyRef, rec: CommitRecord): Promise<boolean> {
    const run = (text: string, params: unknown[]) => (tx ? this.db.queryOn(tx, text, params) : this.db.query(text, params));
    const result =
      rec.kind === 'phase'
        ? await run(this.sql.recordPhase, [
            ref.scope,
            ref.key,
            ref.token,
            rec.phase,
            JSON.stringify(rec.result ?? null),
            rec.leaseMs,
          ])
        : await run(this.sql.finish, [
            ref.scope,
            ref.key,
            ref.token,
            rec.response.status,
            JSON.stringify(rec.response.headers),
            rec.response.body,
          ]);
    return result.rows.length > 0;
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
    return toRecord(row);
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

  async listAbandoned(options: { limit: number; graceMs: number; retentionMs: number }): Promise<AbandonedKey[]> {
    const { rows } = await this.db.query(this.sql.listAbandoned, [Math.max(0, Math.floor(options.graceMs)), options.retentionMs, options.limit]);
    return rows.map((row) => {
      const abandoned: AbandonedKey = { record: toRecord(row) };
      const request = toSnapshot(row.request);
      if (request) abandoned.request = request;
      return abandoned;
    });
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

function toRecord(row: Record<string, unknown>): KeyRecord {
  const state = row.state === KeyState.Done ? KeyState.Done : KeyState.Started;
  const record: KeyRecord = {
    scope: String(row.scope),
    key: String(row.key),
    state,
    fingerprint: bytes(row.fingerprint),
    recoveryPoint: String(row.recovery_point),
    phaseResults: (row.phase_results ?? {}) as PhaseResults,
    token: Number(row.lock_version),
    claimId: String(row.claim_id),
    leaseExpired: row.lease_expired === true,
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
