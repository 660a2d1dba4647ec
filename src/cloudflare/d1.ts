/**
 * `D1Store`: an {@link IdempotencyStore} on Cloudflare D1 (protocol.md K57), the SQLite store's
 * table and statements (K51) through D1's Worker API. D1 has no interactive transaction, so:
 *
 * - the claim is one upsert, sent in one `batch()` (one transaction) with the token it draws;
 * - the takeover and each operator write likewise draw their token in their own batch;
 * - every write after the claim is one statement fenced by the token in its WHERE;
 * - a phase's effects are D1 statements the phase hands to its {@link D1Tx} (`tx.write`): they run in ONE
 *   `batch()` with the fenced recovery point, behind a guard that fails the batch when the token
 *   no longer holds, so the effects and the recorded result commit together or not at all. The
 *   effects' code runs before that batch, so it cannot read its own writes.
 *
 * Times are the database's clock (SQLite's `'now'` on D1's primary), one clock for every Worker.
 */
import { randomUUID } from 'node:crypto';
import { aesGcmCipher, type EncryptionOptions, type ResponseCipher } from '../core/cipher.js';
import { DEFAULT_RETENTION_MS } from '../core/constants.js';
import { InvalidOptionError } from '../core/errors.js';
import type { KeyInspection, StoreStats } from '../store/inspection.js';
import { type PollSettings, pollSettings } from '../store/polling-feed.js';
import { storedForm } from '../store/stored-form.js';
import { DEFAULT_STORE_TIMEOUT_MS, StoreTimeoutError, withDeadline } from '../store/deadline.js';
import type { SweepOptions, SweepPlan, SweepReport } from '../store/sweep.js';
import type {
  AbandonedKey,
  ClaimInput,
  ClaimResult,
  CommitRecord,
  Fenced,
  IdempotencyStore,
  KeyChanges,
  KeyRecord,
  KeyRef,
  OperatorWrite,
  RequestSnapshot,
  StoreCapabilities,
  TakeOverResult,
} from '../store/types.js';
import { ms, type SqliteRowsContext } from '../sqlite/context.js';
import { sweepPlan, sweepReport } from '../sqlite/maintenance.js';
import { inspect, stats } from '../sqlite/operator.js';
import { SqliteKeyWrites } from '../sqlite/key-writes.js';
import { leaseExpired, phaseResults, readRecord, retentionExpired } from '../sqlite/rows.js';
import type { SqliteRow } from '../sqlite/client.js';
import { type D1Statements, d1Statements } from './d1-sql.js';
import type { D1DatabaseLike, D1PreparedStatementLike } from './d1-types.js';

/**
 * A phase's `tx` on D1: `write` the phase's writes (statements prepared on {@link db}, bound);
 * they run in the phase's one `batch()` with its fenced recovery point, after the effects
 * returned, or not at all (protocol.md K57). Reads on `db` run at once, outside that batch.
 */
export interface D1Tx {
  readonly db: D1DatabaseLike;
  write(...statements: D1PreparedStatementLike[]): void;
}

/** Options of {@link D1Store}. */
export interface D1StoreOptions {
  /** The D1 database binding (`env.DB`, wrangler `d1_databases`). */
  database: D1DatabaseLike;
  /** Table name (a plain identifier); `<table>_tokens` goes beside it. @default 'idempotency_keys' */
  table?: string;
  /**
   * The deadline of each call to D1, in ms (protocol.md H17): past it the call fails with a
   * `StoreTimeoutError` (a 503 with `Retry-After`); a late write may still land, and every later
   * write is fenced by the token. `0`: no deadline.
   * @default 5000
   */
  storeTimeoutMs?: number;
  /** Encryption at rest of stored responses (protocol.md K15), as `PostgresStore`'s. */
  encryption?: EncryptionOptions | ResponseCipher;
  /** Wait mode polls (protocol.md K17, K57), as `SqliteStore`'s. @default { minMs: 25, maxMs: 500 } */
  waitPoll?: Partial<PollSettings>;
}

/** D1's answers that mean "try again": the request gets a 503 with Retry-After, nothing is recorded by it. */
const TRANSIENT = /overloaded|Network connection lost|reset because its code was updated|storage caused object to be reset|SQLITE_BUSY|timed out/i;

/** Values as D1 binds them: undefined as NULL, booleans as 0/1, bytes as an ArrayBuffer of their own. */
function bind(value: unknown): unknown {
  if (value === undefined) return null;
  if (typeof value === 'boolean') return value ? 1 : 0;
  if (value instanceof Uint8Array) return value.slice().buffer;
  return value;
}

/**
 * The D1 store. One row per (scope, key), the table `SqliteStore` makes (the same columns and
 * statements, protocol.md K51), on a D1 database.
 *
 * @example
 * ```ts
 * import { D1Store } from 'idem/cloudflare';
 * const store = new D1Store({ database: env.DB });
 * await store.migrate(); // once, e.g. from a deploy script or a first request
 * ```
 */
export class D1Store implements IdempotencyStore<D1Tx> {
  readonly table: string;
  /**
   * Beyond the core (protocol.md "Store capabilities"): the completer, wait mode by polling (D1
   * cannot notify), operator writes and reads, the migration and the sweep in batches. No batches
   * of new keys.
   */
  readonly capabilities: StoreCapabilities = { completion: true, notify: true, operator: true, maintenance: true };
  /** No partitioned mode on D1 (the operator tools read it as PostgresStore's). */
  readonly partitioning = undefined;
  /** No distributed mode on D1. */
  readonly distributed = undefined;
  private readonly db: D1DatabaseLike;
  private readonly sql: D1Statements;
  private readonly timeoutMs: number;
  private readonly ctx: SqliteRowsContext;
  private readonly cipher: ResponseCipher | undefined;
  private readonly writes: SqliteKeyWrites;

  /** @throws {InvalidOptionError} for a database that is not a D1 binding, a bad table name, storeTimeoutMs or waitPoll */
  constructor(options: D1StoreOptions) {
    const db = options?.database as Partial<D1DatabaseLike> | undefined;
    if (!db || typeof db.prepare !== 'function' || typeof db.batch !== 'function') {
      throw new InvalidOptionError('idem/cloudflare: D1Store needs database, the D1 database binding (env.DB)');
    }
    const timeoutMs = options.storeTimeoutMs ?? DEFAULT_STORE_TIMEOUT_MS;
    if (typeof timeoutMs !== 'number' || !(timeoutMs >= 0))
      throw new InvalidOptionError('idem/cloudflare: storeTimeoutMs must be a number of ms >= 0 (0: no deadline)');
    try {
      this.sql = d1Statements(options.table ?? 'idempotency_keys');
    } catch (error) {
      throw new InvalidOptionError((error as Error).message);
    }
    const poll = pollSettings(options.waitPoll);
    if (!poll) throw new InvalidOptionError('idem/cloudflare: waitPoll needs minMs > 0 and maxMs >= minMs (ms)');
    this.db = options.database;
    this.table = this.sql.table;
    this.timeoutMs = timeoutMs;
    const enc = options.encryption;
    this.cipher = enc === undefined ? undefined : 'seal' in enc ? enc : aesGcmCipher(enc);
    this.ctx = { table: this.table, sql: this.sql, db: { rows: (sql, params) => this.rows(sql, params) } };
    this.writes = new SqliteKeyWrites(this.ctx, this.cipher, poll);
  }

  private statement(sql: string, params: unknown[] = []): D1PreparedStatementLike {
    const prepared = this.db.prepare(sql);
    return params.length ? prepared.bind(...params.map(bind)) : prepared;
  }

  /** `call` under the deadline; D1's transient failures as `StoreTimeoutError` (retryable). */
  private async send<R>(what: string, call: () => Promise<R>): Promise<R> {
    try {
      return await withDeadline(call(), this.timeoutMs, () => `idem/cloudflare: D1 gave no answer to ${what} within ${this.timeoutMs} ms`);
    } catch (error) {
      if (error instanceof StoreTimeoutError || !TRANSIENT.test(String((error as Error)?.message))) throw error;
      const timeout = new StoreTimeoutError(`idem/cloudflare: D1 could not run ${what} now: ${(error as Error).message}`);
      (timeout as { cause?: unknown }).cause = error;
      throw timeout;
    }
  }

  /** One statement on its own (D1 runs it as its own transaction): its rows. */
  private rows(sql: string, params: unknown[] = []): Promise<SqliteRow[]> {
    return this.send('a statement', async () => (await this.statement(sql, params).all<SqliteRow>()).results ?? []);
  }

  /** Statements in one `batch()`, one transaction: each one's rows. */
  private batch(what: string, statements: D1PreparedStatementLike[]): Promise<SqliteRow[][]> {
    return this.send(what, async () => (await this.db.batch<SqliteRow>(statements)).map((r) => r.results ?? []));
  }

  /**
   * Creates the key table, its indexes and `<table>_tokens` if missing, in one batch.
   * Idempotent; safe from several Workers at once. (D1 keeps its own journal: no WAL pragma.)
   * @returns `created` when the key table is new, else `exists`
   */
  async migrate(): Promise<{ table: 'created' | 'exists'; partitionsCreated: string[] }> {
    const existed = (await this.tableMode()) !== undefined;
    await this.batch(
      'the migration',
      this.sql.create.map((sql) => this.statement(sql)),
    );
    return { table: existed ? 'exists' : 'created', partitionsCreated: [] };
  }

  /** `plain` when the key table exists, undefined before {@link migrate}. */
  async tableMode(): Promise<'plain' | undefined> {
    return Number((await this.rows(this.sql.tableExists, [this.table]))[0]?.n) > 0 ? 'plain' : undefined;
  }

  /** protocol.md K3, K57: a read answers a live key; else one batch: draw the token, the upsert, the key as it then is. */
  async claim(input: ClaimInput): Promise<ClaimResult> {
    const { scope, key } = input;
    const ret = ms(input.retentionMs);
    const live = (row: SqliteRow | undefined): row is SqliteRow => row !== undefined && !(retentionExpired(row) && leaseExpired(row));
    const seen = (await this.rows(this.sql.read, [ret, ret, scope, key]))[0];
    if (live(seen)) return { kind: 'exists', record: readRecord(this.cipher, seen, scope, key) };
    const [, claimed, now] = await this.batch('the claim', [
      this.statement(this.sql.drawToken),
      this.statement(this.sql.claim, [scope, key, input.fingerprint, ms(input.leaseMs), randomUUID(), ret]),
      this.statement(this.sql.read, [ret, ret, scope, key]),
    ]);
    const row = claimed![0];
    if (row) {
      const token = Number(row.lock_version);
      return { kind: 'claimed', token, claimId: String(row.claim_id), retentionRemainingMs: input.retentionMs, ...(this.cipher && { sealed: true }) };
    }
    // A live row won the race: the batch's read, in the same transaction, is that row.
    if (!now![0]) throw new Error('idem/cloudflare: the claim found no row, and wrote none');
    return { kind: 'exists', record: readRecord(this.cipher, now![0], scope, key) };
  }

  async takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult> {
    const [drawn, taken] = await this.batch('the takeover', [
      this.statement(this.sql.drawToken),
      this.statement(this.sql.takeOver, [ms(leaseMs), ref.scope, ref.key, ref.token]),
    ]);
    const row = taken![0];
    if (!row) return { kind: 'lost' }; // the drawn token goes unused: tokens only grow (protocol.md K8)
    return {
      kind: 'taken',
      token: Number(drawn![0]!.n),
      claimId: String(row.claim_id),
      recoveryPoint: String(row.recovery_point),
      phaseResults: phaseResults(row.phase_results),
      failedAttempts: Number(row.failed_attempts),
    };
  }

  commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects: (tx: D1Tx) => Promise<T>): Promise<Fenced<T>>;
  commit(ref: KeyRef, record: (value: undefined) => CommitRecord): Promise<Fenced>;
  async commit<T>(ref: KeyRef, record: (value: T | undefined) => CommitRecord, effects?: (tx: D1Tx) => Promise<T>): Promise<Fenced<T> | Fenced> {
    const added: D1PreparedStatementLike[] = [];
    const tx: D1Tx = { db: this.db, write: (...statements) => void added.push(...statements) };
    const value = (effects ? await effects(tx) : undefined) as T;
    const write = this.write(ref, record(value));
    if (added.length === 0) return (await this.rows(write.sql, write.params)).length > 0 ? { kind: 'ok', value } : { kind: 'fenced' };
    const guard = this.statement(this.sql.guard, [ref.scope, ref.key, ref.token]);
    try {
      const results = await this.batch('the phase', [guard, ...added, this.statement(write.sql, write.params)]);
      // The guard held, so the key was this token's for the whole batch; an added statement that
      // changed idem's own row is the application's doing.
      return results[results.length - 1]!.length > 0 ? { kind: 'ok', value } : { kind: 'fenced' };
    } catch (error) {
      if (String((error as Error)?.message).includes(this.sql.guardFailed)) return { kind: 'fenced' };
      throw error;
    }
  }

  /** The fenced write of a commit: recovery point and result (Q4), or the response (Q5). */
  private write(ref: KeyRef, rec: CommitRecord): { sql: string; params: unknown[] } {
    const at = [ref.scope, ref.key, ref.token];
    if (rec.kind === 'phase') {
      return { sql: this.sql.recordPhase, params: [rec.phase, rec.phase, JSON.stringify(rec.result ?? null), ms(rec.leaseMs), ...at] };
    }
    const form = storedForm({ inlineMaxBytes: Number.POSITIVE_INFINITY, cipher: this.cipher }, ref, rec.response);
    return { sql: this.sql.finish, params: [rec.response.status, form.headers, form.body ?? new Uint8Array(0), form.keyId, ...at] };
  }

  extendLease(ref: KeyRef, leaseMs: number): Promise<Fenced> {
    return this.writes.extendLease(ref, leaseMs);
  }

  release(ref: KeyRef): Promise<Fenced<'released'>> {
    return this.writes.release(ref);
  }

  countFailure(ref: KeyRef): Promise<Fenced<number>> {
    return this.writes.countFailure(ref);
  }

  discard(ref: KeyRef): Promise<Fenced<'deleted' | 'released'>> {
    return this.writes.discard(ref);
  }

  get(scope: string, key: string, retentionMs: number): Promise<KeyRecord | undefined> {
    return this.writes.get(scope, key, retentionMs);
  }

  saveRequest(ref: KeyRef, request: RequestSnapshot): Promise<Fenced> {
    return this.writes.saveRequest(ref, request);
  }

  discardAbandoned(ref: KeyRef): Promise<Fenced> {
    return this.writes.discardAbandoned(ref);
  }

  listAbandoned(options: { limit: number; graceMs: number; retentionMs: number }): Promise<AbandonedKey[]> {
    return this.writes.listAbandoned(options);
  }

  /** protocol.md K40-K42: the token drawn and the fenced write in one batch; fenced when the write matched nothing. */
  async operate(write: OperatorWrite): Promise<Fenced<{ token: number }>> {
    const { scope, key, token } = write.ref;
    const change =
      write.action === 'release'
        ? this.statement(this.sql.operatorRelease, [write.note, scope, key, token, write.force === true ? 1 : 0])
        : this.statement(this.sql.operatorForget, [randomUUID(), write.note, scope, key, token]);
    const [drawn, changed] = await this.batch('the operator write', [this.statement(this.sql.drawToken), change]);
    return changed!.length === 1 ? { kind: 'ok', value: { token: Number(drawn![0]!.n) } } : { kind: 'fenced' };
  }

  /**
   * Wait mode (protocol.md K17, K57) by polling: D1 cannot notify, so a key a duplicate in this
   * isolate waits for is read again every poll interval ({@link D1StoreOptions.waitPoll}).
   */
  subscribe(scope: string, key: string): Promise<KeyChanges> {
    return this.writes.subscribe(scope, key);
  }

  /**
   * Deletes rows past retention (protocol.md K6): created at or before `now - retentionMs` (the
   * database's clock, fixed when the sweep starts) whose lease is not valid, oldest first, one
   * DELETE per batch (run it from a Cron Trigger).
   * @returns the number of rows deleted
   */
  async sweep(options: SweepOptions = {}): Promise<number> {
    return (await sweepReport(this.ctx, options)).deleted;
  }

  /** {@link sweep} with its report (the shape of `SqliteStore.sweepReport`'s). */
  sweepReport(options: SweepOptions = {}): Promise<SweepReport> {
    return sweepReport(this.ctx, options);
  }

  /** What a sweep would delete now, without deleting (dry run). */
  sweepPlan(retentionMs: number = DEFAULT_RETENTION_MS): Promise<SweepPlan> {
    return sweepPlan(this.ctx, retentionMs);
  }

  /** Everything stored about one key, past retention or not; the response summarised. */
  inspect(scope: string, key: string, retentionMs: number = DEFAULT_RETENTION_MS): Promise<KeyInspection | undefined> {
    return inspect(this.ctx, scope, key, retentionMs);
  }

  /** Table health: rows by state, oldest, past retention unswept, abandoned, live leases. */
  stats(retentionMs: number = DEFAULT_RETENTION_MS): Promise<StoreStats> {
    return stats(this.ctx, retentionMs);
  }

  /** Drops the key table and `<table>_tokens` (tests, tools). */
  async dropTables(): Promise<void> {
    await this.batch(
      'the drop',
      this.sql.drop.map((sql) => this.statement(sql)),
    );
  }
}
