import { randomUUID } from 'node:crypto';
import { aesGcmCipher, type ResponseCipher } from '../core/cipher.js';
import { DEFAULT_RETENTION_MS } from '../core/constants.js';
import { InvalidOptionError } from '../core/errors.js';
import type { DashboardData, DashboardInspection } from '../postgres/dashboard.js';
import { DEFAULT_INLINE_MAX_BYTES, storedForm } from '../store/stored-form.js';
import type { KeyInspection, StoreStats } from '../store/inspection.js';
import type { SweepOptions, SweepPlan, SweepReport } from '../store/sweep.js';
import { DEFAULT_STORE_TIMEOUT_MS, StoreTimeoutError } from '../store/deadline.js';
import { KeyChangeHub } from '../store/key-changes.js';
import { decodeSnapshot, encodeSnapshot } from '../store/records.js';
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
import { isMySqlDriver, type MySqlConnectionLike, type MySqlDriver, type MySqlPoolLike, type MySqlResultHeader, rowsMatched } from './client.js';
import { b, drawToken, MAX_ID_BYTES, type MySqlContext, us } from './context.js';
import { dashboard, dashboardInspect } from './dashboard.js';
import { MySqlExecutor } from './executor.js';
import { migrate, sweepPlan, sweepReport, tableMode } from './maintenance.js';
import { inspect, operate, stats } from './operator.js';
import type { MySqlStoreOptions } from './options.js';
import { leaseExpired, phaseResults, readRecord, type ResponseReader, retentionExpired, text } from './rows.js';
import { type MySqlStatements, mysqlStatements } from './sql.js';
import { DEFAULT_POLL, PollingFeed, type PollSettings, pollRead } from './wait.js';

export type { MySqlStoreOptions } from './options.js';

/** Connections a driver checked out (Drizzle's transaction): idem never destroys them. */
const BORROWED = new WeakSet<object>();
const borrowed = (conn: MySqlConnectionLike): MySqlConnectionLike => (BORROWED.add(conn), conn);

/** Sentinel thrown inside a transaction to roll it back when a fenced write matched no row. */
const FENCED = Symbol('idem.mysql.fenced');

/**
 * The MySQL and MariaDB store: one row per (scope, key) in `idempotency_keys`, the same protocol
 * as `PostgresStore` (protocol.md K3-K23, the statements in sql.ts), on a mysql2 promise pool.
 * A phase's `tx` is the pool's own connection with the transaction open: the business writes
 * on it and the fenced recovery point commit together or not at all.
 *
 * @example
 * ```ts
 * import mysql from 'mysql2/promise';
 * import { MySqlStore } from 'idem/mysql';
 *
 * const store = new MySqlStore({ client: mysql.createPool(process.env.MYSQL_URL!) });
 * await store.migrate();
 * ```
 */
export class MySqlStore<Tx = MySqlConnectionLike> implements IdempotencyStore<Tx> {
  readonly table: string;
  /** No partitioned mode on MySQL (the operator tools read it as PostgresStore's). */
  readonly partitioning = undefined;
  /** No distributed mode on MySQL. */
  readonly distributed = undefined;
  /**
   * Beyond the core (protocol.md "Store capabilities"): completer, wait mode by polling (MySQL
   * and MariaDB cannot notify: see {@link MySqlStoreOptions.waitPoll}), operator writes and
   * reads, migrations and sweeps. No batches.
   */
  readonly capabilities: StoreCapabilities = { completion: true, notify: true, operator: true, maintenance: true };
  private readonly sql: MySqlStatements;
  private readonly db: MySqlExecutor<MySqlConnectionLike>;
  private readonly driver: MySqlDriver<Tx> | undefined;
  private readonly inlineMaxBytes: number;
  private readonly cipher: ResponseCipher | undefined;
  private readonly reader: ResponseReader;
  private readonly ctx: MySqlContext;
  private readonly poll: PollSettings;
  private hub: KeyChangeHub | undefined;

  /**
   * @throws {InvalidOptionError} for a bad table name, a negative `inlineMaxBytes` or
   *   `storeTimeoutMs`, bad encryption keys, or a client without `getConnection`
   */
  constructor(options: MySqlStoreOptions<Tx>) {
    this.driver = isMySqlDriver(options.client) ? (options.client as MySqlDriver<Tx>) : undefined;
    const pool = this.driver ? this.driver.pool : (options.client as MySqlPoolLike);
    if (typeof pool?.getConnection !== 'function') {
      throw new InvalidOptionError('idem/mysql: client must be a mysql2 promise Pool (mysql.createPool from mysql2/promise)');
    }
    const timeoutMs = options.storeTimeoutMs ?? DEFAULT_STORE_TIMEOUT_MS;
    if (!(timeoutMs >= 0)) throw new InvalidOptionError('idem/mysql: storeTimeoutMs must be a number of ms >= 0 (0: no deadline)');
    this.inlineMaxBytes = options.inlineMaxBytes ?? DEFAULT_INLINE_MAX_BYTES;
    if (!(this.inlineMaxBytes >= 0)) throw new InvalidOptionError('idem/mysql: inlineMaxBytes must be a number of bytes >= 0');
    try {
      this.sql = mysqlStatements(options.table ?? 'idempotency_keys');
    } catch (error) {
      throw new InvalidOptionError((error as Error).message);
    }
    this.table = this.sql.table;
    this.db = new MySqlExecutor(pool, timeoutMs);
    const enc = options.encryption;
    this.cipher = enc === undefined ? undefined : 'seal' in enc ? enc : aesGcmCipher(enc);
    this.reader = {
      cipher: this.cipher,
      blob: async (scope: string, key: string, id: string) => {
        const row = (await this.db.rows(this.sql.blobGet, [b(scope), b(key), id]))[0];
        return row ? (row.body as Uint8Array) : undefined;
      },
    };
    this.ctx = { table: this.table, sql: this.sql, db: this.db, reader: this.reader };
    this.poll = { ...DEFAULT_POLL, ...options.waitPoll };
    if (!(this.poll.minMs > 0) || !(this.poll.maxMs >= this.poll.minMs)) {
      throw new InvalidOptionError('idem/mysql: waitPoll needs minMs > 0 and maxMs >= minMs (ms)');
    }
  }

  /**
   * Wait mode (protocol.md K17) by polling: a subscription to one key's finish, release,
   * discard and takeover, told by reading the key every poll interval (src/mysql/wait.ts;
   * {@link MySqlStoreOptions.waitPoll}) while someone waits for it. Resolves once the first read
   * is done; a store whose engine never waits reads nothing.
   */
  subscribe(scope: string, key: string): Promise<KeyChanges> {
    if (!this.hub) {
      const feed = new PollingFeed(pollRead(this.ctx), this.poll);
      this.hub = new KeyChangeHub(feed, this.db.timeoutMs);
      feed.hub = this.hub;
    }
    return this.hub.subscribe(scope, key);
  }

  /**
   * Creates the key table, `<table>_blobs` and `<table>_tokens` if missing, and adds to a table
   * made by an earlier version the columns it lacks, under a named lock so that hosts starting
   * at once do not race. Idempotent.
   * @returns `created` when the key table is new, else `exists`
   */
  migrate(): Promise<{ table: 'created' | 'exists'; partitionsCreated: string[] }> {
    return migrate(this.ctx);
  }

  /** `plain` when the key table exists, undefined before {@link migrate} (MySQL tables are never partitioned). */
  tableMode(): Promise<'plain' | undefined> {
    return tableMode(this.ctx);
  }

  async claim(input: ClaimInput): Promise<ClaimResult> {
    const scope = b(input.scope);
    const key = b(input.key);
    if (scope.length > MAX_ID_BYTES || key.length > MAX_ID_BYTES) throw new Error(`idem/mysql: scope and key are at most ${MAX_ID_BYTES} bytes of UTF-8`);
    const ret = us(input.retentionMs);
    const claimed = (token: number, claimId: string): ClaimResult => ({
      kind: 'claimed',
      token,
      claimId,
      // A new row's created_at is the claim's own now: its whole retention is left (protocol.md K20).
      retentionRemainingMs: input.retentionMs,
      ...(this.cipher && { sealed: true }),
    });
    // Bounded: each turn claims, finds a live row, or loses a race to a writer that made
    // progress (a replacement, a deletion), which cannot repeat without bound.
    for (let attempt = 0; attempt < 5; attempt++) {
      // The key as committed now: a finished key is answered by this one read (the replay).
      let row = (await this.db.rows(this.sql.read, [ret, ret, scope, key]))[0];
      if (!row) {
        const token = await drawToken(this.ctx);
        const claimId = randomUUID();
        const inserted = await this.db.write(this.sql.claim, [scope, key, Buffer.from(input.fingerprint), us(input.leaseMs), token, claimId]);
        if (inserted.affectedRows === 1) return claimed(token, claimId);
        // A concurrent claim committed first: read it as it is now.
        row = (await this.db.rows(this.sql.readLocked, [ret, ret, scope, key]))[0];
        if (!row) continue; // deleted in between (discarded, swept): claim again
      }
      // Past retention the row counts as absent, unless its lease is still valid (its worker is alive).
      if (retentionExpired(row) && leaseExpired(row)) {
        const token = await drawToken(this.ctx);
        const claimId = randomUUID();
        const replaced = await this.db.write(this.sql.replaceExpired, [
          Buffer.from(input.fingerprint),
          us(input.leaseMs),
          token,
          claimId,
          scope,
          key,
          row.lock_version,
          ret,
        ]);
        if (rowsMatched(replaced) === 1) {
          // The replaced response's blob is dead (best effort: a sweep of the row deletes it too).
          if (row.response_body_ref) await this.db.write(this.sql.blobDelete, [scope, key, String(row.response_body_ref)]).catch(() => undefined);
          return claimed(token, claimId);
        }
        continue;
      }
      return { kind: 'exists', record: await readRecord(this.reader, row, input.scope, input.key, input.fingerprint) };
    }
    throw new Error('idem/mysql: claim did not settle after 5 attempts');
  }

  async takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult> {
    const token = await drawToken(this.ctx);
    const header = await this.db.write(this.sql.takeOver, [us(leaseMs), token, b(ref.scope), b(ref.key), ref.token]);
    if (rowsMatched(header) === 0) return { kind: 'lost' };
    const row = (await this.db.rows(this.sql.takenOver, [b(ref.scope), b(ref.key), token]))[0];
    if (!row) return { kind: 'lost' }; // taken over again in between
    return {
      kind: 'taken',
      token,
      claimId: String(row.claim_id),
      recoveryPoint: String(row.recovery_point),
      phaseResults: phaseResults(row.phase_results),
      failedAttempts: Number(row.failed_attempts),
    };
  }

  commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects: (tx: Tx) => Promise<T>): Promise<Fenced<T>>;
  commit(ref: KeyRef, record: (value: undefined) => CommitRecord): Promise<Fenced>;
  async commit<T>(ref: KeyRef, record: (value: T | undefined) => CommitRecord, effects?: (tx: Tx) => Promise<T>): Promise<Fenced<T> | Fenced> {
    if (!effects) {
      const rec = record(undefined);
      // An out-of-line body needs a transaction for the row and its blob; anything else is one statement.
      if (rec.kind === 'phase' || rec.response.body.length <= this.inlineMaxBytes) {
        return (await this.write(undefined, ref, rec)) ? { kind: 'ok', value: undefined } : { kind: 'fenced' };
      }
    }
    try {
      const body = async (tx: Tx, conn: MySqlConnectionLike) => {
        const value = effects ? await effects(tx) : (undefined as T);
        // The fenced write comes last (protocol.md Q4): no row matched means another worker took
        // the key over while the effects ran; throwing rolls the effects back with it.
        if (!(await this.write(conn, ref, record(value)))) throw FENCED;
        return value;
      };
      // A driver's phase runs in the client's own transaction; a pool's on its connection.
      const value = this.driver && effects ? await this.inDriver(this.driver, body) : await this.db.transaction((conn) => body(conn as Tx, conn));
      return { kind: 'ok', value };
    } catch (error) {
      if (error === FENCED) return { kind: 'fenced' };
      throw error;
    }
  }

  /**
   * `body` in the driver's own transaction. The connection is the driver's (Drizzle checked it
   * out): past the deadline idem does not destroy it (the driver rolls back and releases it,
   * its pool stays whole once the server answers) and answers `StoreTimeoutError` at the
   * deadline, not when the driver's rollback ends (protocol.md H17, K45).
   */
  private inDriver<T>(driver: MySqlDriver<Tx>, body: (tx: Tx, conn: MySqlConnectionLike) => Promise<T>): Promise<T> {
    let expire!: (error: unknown) => void;
    const expired = new Promise<never>((_, reject) => (expire = reject));
    const run = driver.transaction(async (tx, conn) => {
      try {
        return await body(tx, borrowed(conn));
      } catch (error) {
        if (error instanceof StoreTimeoutError) expire(error);
        throw error;
      }
    });
    run.catch(() => undefined); // settles in the background after a deadline
    return Promise.race([run, expired]);
  }

  /**
   * The fenced write of a commit, on `conn` in a transaction or on its own (autocommit; never
   * for an out-of-line body, whose blob is written after the fenced UPDATE matched).
   * @returns false when fenced
   */
  private async write(conn: MySqlConnectionLike | undefined, ref: KeyRef, rec: CommitRecord): Promise<boolean> {
    const run = (sql: string, values: unknown[]) =>
      conn ? this.db.on<MySqlResultHeader>(conn, sql, values, true, !BORROWED.has(conn)) : this.db.write(sql, values);
    const scope = b(ref.scope);
    const key = b(ref.key);
    if (rec.kind === 'phase') {
      const result = JSON.stringify(rec.result ?? null);
      return rowsMatched(await run(this.sql.recordPhase, [rec.phase, rec.phase, result, us(rec.leaseMs), scope, key, ref.token])) > 0;
    }
    const form = storedForm({ inlineMaxBytes: this.inlineMaxBytes, cipher: this.cipher }, ref, rec.response);
    const values = [rec.response.status, form.headers, form.body && Buffer.from(form.body), form.blob?.ref.id ?? null, form.keyId, scope, key, ref.token];
    if (rowsMatched(await run(this.sql.finish, values)) === 0) return false;
    if (form.blob) {
      if (!conn) throw new Error('idem/mysql: an out-of-line body is written inside a transaction');
      await run(this.sql.blobClear, [scope, key]);
      await run(this.sql.blobPut, [scope, key, form.blob.ref.id, Buffer.from(form.blob.body)]);
    }
    return true;
  }

  /** A fenced statement on its own: ok when it matched the row. */
  private async fenced(sql: string, ref: KeyRef, before: unknown[] = [], after: unknown[] = []): Promise<boolean> {
    return rowsMatched(await this.db.write(sql, [...before, b(ref.scope), b(ref.key), ref.token, ...after])) > 0;
  }

  async extendLease(ref: KeyRef, leaseMs: number): Promise<Fenced> {
    return (await this.fenced(this.sql.extendLease, ref, [us(leaseMs)])) ? { kind: 'ok', value: undefined } : { kind: 'fenced' };
  }

  async release(ref: KeyRef): Promise<Fenced<'released'>> {
    return (await this.fenced(this.sql.release, ref)) ? { kind: 'ok', value: 'released' } : { kind: 'fenced' };
  }

  async countFailure(ref: KeyRef): Promise<Fenced<number>> {
    if (!(await this.fenced(this.sql.countFailure, ref))) return { kind: 'fenced' };
    const row = (await this.db.rows(this.sql.failedAttempts, [b(ref.scope), b(ref.key), ref.token]))[0];
    return row ? { kind: 'ok', value: Number(row.failed_attempts) } : { kind: 'fenced' };
  }

  async discard(ref: KeyRef): Promise<Fenced<'deleted' | 'released'>> {
    if (await this.fenced(this.sql.discard, ref)) return { kind: 'ok', value: 'deleted' };
    return this.release(ref);
  }

  async get(scope: string, key: string, retentionMs: number): Promise<KeyRecord | undefined> {
    const row = (await this.db.rows(this.sql.read, [us(retentionMs), us(retentionMs), b(scope), b(key)]))[0];
    if (!row || retentionExpired(row)) return undefined;
    return readRecord(this.reader, row, scope, key);
  }

  async saveRequest(ref: KeyRef, request: RequestSnapshot): Promise<Fenced> {
    return (await this.fenced(this.sql.saveRequest, ref, [encodeSnapshot(request)])) ? { kind: 'ok', value: undefined } : { kind: 'fenced' };
  }

  async discardAbandoned(ref: KeyRef): Promise<Fenced> {
    return (await this.fenced(this.sql.discardAbandoned, ref)) ? { kind: 'ok', value: undefined } : { kind: 'fenced' };
  }

  async listAbandoned(options: { limit: number; graceMs: number; retentionMs: number }): Promise<AbandonedKey[]> {
    const ret = us(options.retentionMs);
    const rows = await this.db.rows(this.sql.listAbandoned, [ret, ret, us(Math.max(0, Math.floor(options.graceMs))), ret, options.limit]);
    return Promise.all(
      rows.map(async (row) => {
        const abandoned: AbandonedKey = { record: await readRecord(this.reader, row, text(row.scope), text(row.key)) };
        const request = row.request === null || row.request === undefined ? undefined : decodeSnapshot(JSON.parse(text(row.request)));
        if (request) abandoned.request = request;
        return abandoned;
      }),
    );
  }

  /**
   * Deletes rows past retention (protocol.md K6): created at or before `now() - retentionMs`
   * (server clock, fixed when the sweep starts) and whose lease is not valid, oldest first in
   * batches (`DELETE … ORDER BY created_at LIMIT`) at READ COMMITTED; then trims the token table
   * to its highest row. Safe from several hosts at once.
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

  /**
   * One operator write (protocol.md K40-K42): a release ends the lease now, or a forget makes a
   * finished key claimable again; fenced by the token read and the state it needs, under a new
   * token, the note recorded on the row (src/mysql/operator.ts).
   */
  async operate(write: OperatorWrite): Promise<Fenced<{ token: number }>> {
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

  /** What `idem dashboard` shows, as `PostgresStore.dashboard`: stats, the last 24 h by hour, stuck, failing, oldest and past-retention keys. */
  dashboard(retentionMs: number = DEFAULT_RETENTION_MS, limit = 20): Promise<DashboardData> {
    return dashboard(this.ctx, retentionMs, limit);
  }

  /** {@link inspect} for the dashboard: phase names instead of phase results. */
  dashboardInspect(scope: string, key: string, retentionMs: number = DEFAULT_RETENTION_MS): Promise<DashboardInspection | undefined> {
    return dashboardInspect(this.ctx, scope, key, retentionMs);
  }

  /** Drops the key table, `<table>_blobs` and `<table>_tokens` (tests, tools). */
  async dropTables(): Promise<void> {
    for (const statement of this.sql.drop) await this.db.write(statement, [], false);
  }
}
