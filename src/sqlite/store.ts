import { randomUUID } from 'node:crypto';
import { aesGcmCipher, type ResponseCipher } from '../core/cipher.js';
import { DEFAULT_RETENTION_MS } from '../core/constants.js';
import { InvalidOptionError } from '../core/errors.js';
import type { KeyInspection, StoreStats } from '../store/inspection.js';
import { pollSettings } from '../store/polling-feed.js';
import { storedForm } from '../store/stored-form.js';
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
import { isLibsqlClient, isSqliteDatabase, type SqliteClient, type SqliteDatabaseLike, type SqliteRow, type SqliteTxOf } from './client.js';
import { drawToken, ms, type SqliteContext } from './context.js';
import { SqliteExecutor, type SqliteRun } from './executor.js';
import { migrate, sweepPlan, sweepReport, tableMode } from './maintenance.js';
import { inspect, operate, stats } from './operator.js';
import type { SqliteStoreOptions } from './options.js';
import { SqliteKeyWrites } from './key-writes.js';
import { leaseExpired, phaseResults, readRecord, retentionExpired } from './rows.js';
import { type SqliteStatements, sqliteStatements } from './sql.js';

export type { SqliteStoreOptions } from './options.js';

/** Thrown inside a transaction to roll it back when a fenced write matched no row. */
const FENCED = Symbol('idem.sqlite.fenced');

/**
 * The SQLite store: one row per (scope, key) in `idempotency_keys` of one database file, the
 * same protocol as `PostgresStore` (protocol.md K3-K23, K51; the statements in sql.ts), shared by
 * every process on the host that opens the file. A phase's `tx` is the client inside
 * `BEGIN IMMEDIATE` (libSQL: its `Transaction`): the business writes on it and the fenced
 * recovery point commit together or not at all.
 *
 * @example
 * ```ts
 * import { DatabaseSync } from 'node:sqlite';
 * import { SqliteStore } from 'idem/sqlite';
 *
 * const store = new SqliteStore({ client: new DatabaseSync('app.db') });
 * await store.migrate();
 * ```
 */
export class SqliteStore<C extends SqliteClient = SqliteDatabaseLike> implements IdempotencyStore<SqliteTxOf<C>> {
  readonly table: string;
  /** No partitioned mode on SQLite (the operator tools read it as PostgresStore's). */
  readonly partitioning = undefined;
  /** No distributed mode on SQLite. */
  readonly distributed = undefined;
  /**
   * Beyond the core (protocol.md "Store capabilities"): completer, wait mode by polling (SQLite
   * cannot notify, protocol.md K51), operator writes and reads, migrations and sweeps. No batches.
   */
  readonly capabilities: StoreCapabilities = { completion: true, notify: true, operator: true, maintenance: true };
  private readonly sql: SqliteStatements;
  private readonly db: SqliteExecutor<SqliteTxOf<C>>;
  private readonly cipher: ResponseCipher | undefined;
  private readonly ctx: SqliteContext;
  private readonly writes: SqliteKeyWrites;

  /**
   * @throws {InvalidOptionError} for a client that is none of the supported ones, a bad table
   *   name, a negative `busyTimeoutMs`, bad `waitPoll` or bad encryption keys
   */
  constructor(options: SqliteStoreOptions<C>) {
    const { client } = options;
    if (!isLibsqlClient(client) && !isSqliteDatabase(client)) {
      throw new InvalidOptionError(
        "idem/sqlite: client must be node:sqlite's DatabaseSync, better-sqlite3's or bun:sqlite's Database, or @libsql/client's Client",
      );
    }
    const busyTimeoutMs = options.busyTimeoutMs ?? 5000;
    if (!(Number.isInteger(busyTimeoutMs) && busyTimeoutMs >= 0)) throw new InvalidOptionError('idem/sqlite: busyTimeoutMs must be an integer of ms >= 0');
    try {
      this.sql = sqliteStatements(options.table ?? 'idempotency_keys');
    } catch (error) {
      throw new InvalidOptionError((error as Error).message);
    }
    // The wait for another process's write lock (node:sqlite's default is none: SQLITE_BUSY at once).
    if (!isLibsqlClient(client)) client.exec(`PRAGMA busy_timeout = ${busyTimeoutMs}`);
    this.table = this.sql.table;
    this.db = new SqliteExecutor<SqliteTxOf<C>>(client);
    const enc = options.encryption;
    this.cipher = enc === undefined ? undefined : 'seal' in enc ? enc : aesGcmCipher(enc);
    this.ctx = { table: this.table, sql: this.sql, db: this.db as SqliteExecutor<unknown> };
    const poll = pollSettings(options.waitPoll);
    if (!poll) throw new InvalidOptionError('idem/sqlite: waitPoll needs minMs > 0 and maxMs >= minMs (ms)');
    this.writes = new SqliteKeyWrites(this.ctx, this.cipher, poll);
  }

  /**
   * Wait mode (protocol.md K17, K51) by polling: SQLite cannot notify, so a key a duplicate of
   * this process waits for is read again every poll interval ({@link SqliteStoreOptions.waitPoll}).
   * Resolves once the first read is done; a store whose engine never waits reads nothing.
   */
  subscribe(scope: string, key: string): Promise<KeyChanges> {
    return this.writes.subscribe(scope, key);
  }

  /**
   * Turns on WAL (kept in the file) and creates the key table, its indexes and
   * `<table>_tokens` if missing. Idempotent; safe from several processes at once.
   * @returns `created` when the key table is new, else `exists`
   * @throws {Error} when the file cannot be put in WAL mode (e.g. on a read-only medium)
   */
  migrate(): Promise<{ table: 'created' | 'exists'; partitionsCreated: string[] }> {
    return migrate(this.ctx);
  }

  /** `plain` when the key table exists, undefined before {@link migrate}. */
  tableMode(): Promise<'plain' | undefined> {
    return tableMode(this.ctx);
  }

  async claim(input: ClaimInput): Promise<ClaimResult> {
    const { scope, key } = input;
    const ret = ms(input.retentionMs);
    const claimed = (token: number, claimId: string): ClaimResult => ({
      kind: 'claimed',
      token,
      claimId,
      // A new row's created_at is the claim's own now: its whole retention is left (protocol.md K20).
      retentionRemainingMs: input.retentionMs,
      ...(this.cipher && { sealed: true }),
    });
    const live = (row: SqliteRow | undefined): boolean => row !== undefined && !(retentionExpired(row) && leaseExpired(row));
    // The key as committed now, outside any write lock: a replay, a mismatch or a key in
    // progress is answered by this one read.
    const seen = (await this.db.rows(this.sql.read, [ret, ret, scope, key]))[0];
    if (seen && live(seen)) return { kind: 'exists', record: readRecord(this.cipher, seen, scope, key) };
    // Absent, or past retention with its lease over: decided in one write transaction, where the
    // row cannot change between the read and the write (one writer per file, protocol.md K51).
    const outcome = await this.db.transaction(async (run) => {
      const row = (await run(this.sql.read, [ret, ret, scope, key]))[0];
      if (row && live(row)) return { kind: 'exists' as const, row };
      const token = await drawToken(this.ctx, run);
      const claimId = randomUUID();
      const fingerprint = Buffer.from(input.fingerprint);
      if (row) {
        const replaced = await run(this.sql.replaceExpired, [fingerprint, ms(input.leaseMs), token, claimId, scope, key, row.lock_version, ret]);
        if (replaced.length !== 1) throw new Error('idem/sqlite: a row past retention changed inside the write transaction');
      } else {
        await run(this.sql.claim, [scope, key, fingerprint, ms(input.leaseMs), token, claimId]);
      }
      return { kind: 'claimed' as const, token, claimId };
    });
    if (outcome.kind === 'claimed') return claimed(outcome.token, outcome.claimId);
    return { kind: 'exists', record: readRecord(this.cipher, outcome.row, scope, key) };
  }

  async takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult> {
    try {
      return await this.db.transaction(async (run) => {
        const token = await drawToken(this.ctx, run);
        const row = (await run(this.sql.takeOver, [ms(leaseMs), token, ref.scope, ref.key, ref.token]))[0];
        if (!row) throw FENCED; // the compare-and-set lost: roll the drawn token back with it
        return {
          kind: 'taken' as const,
          token,
          claimId: String(row.claim_id),
          recoveryPoint: String(row.recovery_point),
          phaseResults: phaseResults(row.phase_results),
          failedAttempts: Number(row.failed_attempts),
        };
      });
    } catch (error) {
      if (error === FENCED) return { kind: 'lost' };
      throw error;
    }
  }

  commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects: (tx: SqliteTxOf<C>) => Promise<T>): Promise<Fenced<T>>;
  commit(ref: KeyRef, record: (value: undefined) => CommitRecord): Promise<Fenced>;
  async commit<T>(ref: KeyRef, record: (value: T | undefined) => CommitRecord, effects?: (tx: SqliteTxOf<C>) => Promise<T>): Promise<Fenced<T> | Fenced> {
    // No effects: the fenced write alone, one statement (its own transaction).
    if (!effects)
      return (await this.write((sql, params) => this.db.rows(sql, params), ref, record(undefined))) ? { kind: 'ok', value: undefined } : { kind: 'fenced' };
    try {
      const value = await this.db.transaction(async (run, tx) => {
        const value = await effects(tx);
        // The fenced write comes last (protocol.md Q4): no row matched means another worker took
        // the key over before this transaction began; throwing rolls the effects back with it.
        if (!(await this.write(run, ref, record(value)))) throw FENCED;
        return value;
      });
      return { kind: 'ok', value };
    } catch (error) {
      if (error === FENCED) return { kind: 'fenced' };
      throw error;
    }
  }

  /**
   * The fenced write of a commit on `run` (inside the phase's transaction, or on its own).
   * @returns false when fenced
   */
  private async write(run: SqliteRun, ref: KeyRef, rec: CommitRecord): Promise<boolean> {
    if (rec.kind === 'phase') {
      const result = JSON.stringify(rec.result ?? null);
      return (await run(this.sql.recordPhase, [rec.phase, rec.phase, result, ms(rec.leaseMs), ref.scope, ref.key, ref.token])).length > 0;
    }
    const form = storedForm({ inlineMaxBytes: Number.POSITIVE_INFINITY, cipher: this.cipher }, ref, rec.response);
    const values = [rec.response.status, form.headers, Buffer.from(form.body ?? new Uint8Array(0)), form.keyId, ref.scope, ref.key, ref.token];
    return (await run(this.sql.finish, values)).length > 0;
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

  /**
   * Deletes rows past retention (protocol.md K6): created at or before `now() - retentionMs`
   * (the database's clock, fixed when the sweep starts) and whose lease is not valid, oldest
   * first, one batch per DELETE. Safe from several processes at once.
   * @returns the number of rows deleted
   */
  async sweep(options: SweepOptions = {}): Promise<number> {
    return (await sweepReport(this.ctx, options)).deleted;
  }

  /** {@link sweep} with its report (the same shape as `PostgresStore.sweepReport`'s). */
  sweepReport(options: SweepOptions = {}): Promise<SweepReport> {
    return sweepReport(this.ctx, options);
  }

  /** What a sweep would delete now, without deleting (dry run). */
  sweepPlan(retentionMs: number = DEFAULT_RETENTION_MS): Promise<SweepPlan> {
    return sweepPlan(this.ctx, retentionMs);
  }

  /** One operator write (protocol.md K40-K42), fenced by the token read; see src/sqlite/operator.ts. */
  operate(write: OperatorWrite): Promise<Fenced<{ token: number }>> {
    return operate(this.ctx, write);
  }

  /** Everything stored about one key, past retention or not (`idem inspect`); the response summarised. */
  inspect(scope: string, key: string, retentionMs: number = DEFAULT_RETENTION_MS): Promise<KeyInspection | undefined> {
    return inspect(this.ctx, scope, key, retentionMs);
  }

  /** Table health (`idem stats`): rows by state, oldest, past retention unswept, abandoned, live leases. */
  stats(retentionMs: number = DEFAULT_RETENTION_MS): Promise<StoreStats> {
    return stats(this.ctx, retentionMs);
  }

  /** Drops the key table and `<table>_tokens` (tests, tools). */
  dropTables(): Promise<void> {
    return this.db.script(this.sql.drop);
  }
}
