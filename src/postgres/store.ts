import { DEFAULT_RETENTION_MS, KeyState } from '../core/constants.js';
import { InvalidOptionError } from '../core/errors.js';
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
import { type PartitionedStatements, partitionedStatements, type Statements, statements } from './sql.js';

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
  response: { status: number; headers: Array<[string, string]>; bytes: number } | null;
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
  private readonly psql: PartitionedStatements | undefined;

  /** @throws {TypeError} for a client that is neither a pg.Pool nor PGlite; {@link InvalidOptionError} for a bad table name. */
  constructor(options: PostgresStoreOptions) {
    this.db = toExecutor(options.client);
    this.table = options.table ?? 'idempotency_keys';
    try {
      this.sql = statements(this.table);
    } catch (error) {
      throw new InvalidOptionError((error as Error).message);
    }
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
        if (won) return { outcome: 'claimed', token: Number(won.lock_version), claimId: String(won.claim_id) };
        continue;
      }
      return { outcome: 'exists', record: toRecord(row) };
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
          if (now) return { outcome: 'exists', record: toRecord(now) };
          throw new Error('idem/postgres: a key row vanished during its partitioned claim');
        }
        return { outcome: 'exists', record: toRecord(row) };
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
      response:
        row.response_status === null || row.response_status === undefined
          ? null
          : {
              status: Number(row.response_status),
              headers: (row.response_headers ?? []) as Array<[string, string]>,
              bytes: Number(row.response_bytes ?? 0),
            },
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
