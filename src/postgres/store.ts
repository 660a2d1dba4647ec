import { DEFAULT_RETENTION_MS } from '../core/constants.js';
import type {
  AbandonedKey,
  BatchInput,
  BatchOutcome,
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
  StoredResponse,
  TakeOverResult,
} from '../store/types.js';
import { decodeSnapshot, encodeSnapshot } from '../store/records.js';
import { type DistributeResult, distribute, distributionOf } from './citus.js';
import { commitBatch } from './batch.js';
import { claim, takeOver } from './claim.js';
import type { Queryable, SqlDriver } from './client.js';
import { commitRecord, commitWithEffects } from './commit.js';
import { type DashboardData, dashboard, dashboardInspect } from './dashboard.js';
import type { KeyInspection, StoreStats } from '../store/inspection.js';
import type { SweepOptions, SweepPlan, SweepReport } from '../store/sweep.js';
import { inspect, stats } from './inspect.js';
import { migrate, tableMode } from './migrate.js';
import type { StoreContext } from './context.js';
import { type PartitionOptions, type PostgresStoreOptions, storeContext } from './options.js';
import { notifyAfterCommit, TableFeed } from './notify.js';
import { maintain } from './partitions.js';
import { readRecord } from './responses.js';
import { blobRef, toRecord } from './rows.js';
import { sweepPlan, sweepReport } from './sweep.js';

export { DEFAULT_INLINE_MAX_BYTES, DEFAULT_STORE_TIMEOUT_MS, type PartitionOptions, type PostgresStoreOptions } from './options.js';
export type { DistributeResult } from './citus.js';
export type { DashboardData, DashboardKey } from './dashboard.js';
export type { KeyInspection, StoreStats } from '../store/inspection.js';
export type { SweepOptions, SweepPlan, SweepProgress, SweepReport } from '../store/sweep.js';

/**
 * The PostgreSQL store: one row per (scope, key) in `idempotency_keys` (protocol.md Q1-Q6).
 * Works on `pg.Pool` and PGlite, whose transaction handle given to local effects is a
 * {@link Queryable} on the same connection as the fenced write, and on any client through a
 * {@link SqlDriver} (`idem/postgresjs`, …), whose effects get the client's own transaction.
 *
 * The work is split by concern: options.ts (options and validation), claim.ts (claim and
 * takeover), commit.ts (fenced phases and finish), responses.ts (sealing, blobs), rows.ts
 * (row decoding), sweep.ts and partitions.ts (retention), inspect.ts (operator reads), and
 * the statements in sql.ts and sql/.
 *
 * @example
 * ```ts
 * const store = new PostgresStore({ client: new pg.Pool({ connectionString }) });
 * await store.migrate();
 * ```
 */
export class PostgresStore<Tx = Queryable> implements IdempotencyStore<Tx> {
  readonly table: string;
  /** Partitioned mode's options, or undefined for a plain table. */
  readonly partitioning: Required<PartitionOptions> | undefined;
  /** `citus` in Citus mode (option `distributed`), else undefined. */
  readonly distributed: 'citus' | undefined;
  private readonly ctx: StoreContext<Tx>;
  /**
   * Beyond the core (protocol.md "Store capabilities"): completer, batches, operator writes and
   * reads, migrations and sweeps; wait mode (`notify`) when made with `notify`.
   */
  readonly capabilities: StoreCapabilities;

  /**
   * @throws {TypeError} for a client that is neither a pg.Pool, PGlite nor a {@link SqlDriver}
   * @throws {InvalidOptionError} for a bad table name, a negative `inlineMaxBytes`, bad encryption
   *   keys, or an option the driver cannot honour (`maxPoolWaiting`; `notify` without `listen`)
   */
  constructor(options: PostgresStoreOptions<Tx>) {
    this.ctx = storeContext(options);
    this.table = this.ctx.table;
    this.partitioning = this.ctx.partitioning;
    this.distributed = this.ctx.citus ? 'citus' : undefined;
    if (this.ctx.channel) {
      const { hub } = new TableFeed(this.ctx.client, this.ctx.channel, this.ctx.timeoutMs);
      this.subscribe = (scope, key) => hub.subscribe(scope, key);
    }
    this.capabilities = { completion: true, batch: true, operator: true, maintenance: true, ...(this.subscribe && { notify: true }) };
  }

  /**
   * Present when the store was made with `notify: true` (wait mode, protocol.md K17): a
   * subscription to one key's finish, release, discard and takeover, woken by `LISTEN/NOTIFY`.
   * On a `pg.Pool` one connection per process and pool listens while any subscription is open
   * (it is checked out of the pool and returned when the last one closes); on PGlite, its
   * `listen`; on a driver, the driver's `listen`.
   */
  readonly subscribe?: (scope: string, key: string) => Promise<KeyChanges>;

  /**
   * Creates the table, its index and token sequence if missing, and upgrades a table made by
   * an earlier version; in partitioned mode also the partitions from yesterday to `daysAhead`
   * days ahead. Idempotent; safe to run from several hosts at once.
   *
   * @returns what it did: `created` (new table), `exists`, plus partitions created
   * @throws {InvalidOptionError} when the table exists in the other mode (plain vs partitioned)
   */
  migrate(): Promise<{ table: 'created' | 'exists'; partitionsCreated: string[] }> {
    return migrate(this.ctx);
  }

  /** The table as it exists now: `plain`, `partitioned`, or undefined when it does not exist (not migrated). */
  tableMode(): Promise<'plain' | 'partitioned' | undefined> {
    return tableMode(this.ctx);
  }

  /**
   * Citus mode: distributes the key table by `scope` and `<table>_blobs` co-located with it
   * (`create_distributed_table`), if they are not yet; run it after {@link migrate}, through
   * the coordinator. Then co-locate the tenant's business tables with
   * `create_distributed_table('<your_table>', '<tenant column>', colocate_with => '<table>')`
   * so that a phase's business write and its recovery point commit on one shard.
   * Idempotent.
   *
   * @returns what it did, the co-location group and the call that co-locates a business table
   * @throws {InvalidOptionError} on a store without `distributed: 'citus'`, without the citus
   *   extension, or a table distributed by another column
   */
  distribute(): Promise<DistributeResult> {
    return distribute(this.ctx);
  }

  /** `citus` when the table is a Citus table distributed by hash, else undefined (no Citus, plain table, not migrated). */
  async distribution(): Promise<'citus' | undefined> {
    return (await distributionOf(this.ctx, this.table)) ? 'citus' : undefined;
  }

  /**
   * Partitioned mode: creates the daily partitions from yesterday (UTC, database clock) to
   * `daysAhead` days ahead that are missing. Idempotent; run it at least daily (cron, or
   * `idem partitions`); `sweep()` drops the expired ones.
   *
   * @returns the names of the partitions created
   * @throws {InvalidOptionError} on a plain-table store
   */
  maintain(): Promise<string[]> {
    return maintain(this.ctx);
  }

  async claim(input: ClaimInput): Promise<ClaimResult> {
    const result = await claim(this.ctx, input);
    // A new row's created_at is the claim's own now(): its whole retention is left (protocol.md K20).
    if (result.kind === 'claimed') {
      result.retentionRemainingMs = input.retentionMs;
      if (this.ctx.cipher) result.sealed = true;
    }
    return result;
  }

  async takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult> {
    const taken = await takeOver(this.ctx, ref, leaseMs);
    if (taken.kind === 'taken') await this.notified(ref);
    return taken;
  }

  commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects: (tx: Tx) => Promise<T>): Promise<Fenced<T>>;
  commit(ref: KeyRef, record: (value: undefined) => CommitRecord): Promise<Fenced>;
  async commit<T>(ref: KeyRef, record: (value: T | undefined) => CommitRecord, effects?: (tx: Tx) => Promise<T>): Promise<Fenced<T> | Fenced> {
    if (!this.ctx.notifyAfterCommit) return effects ? commitWithEffects(this.ctx, ref, record, effects) : commitRecord(this.ctx, ref, record(undefined));
    let finish = false;
    const recorded = (value: T | undefined) => {
      const rec = record(value);
      finish = rec.kind === 'finish';
      return rec;
    };
    const result = effects ? await commitWithEffects(this.ctx, ref, recorded, effects) : await commitRecord(this.ctx, ref, recorded(undefined));
    if (finish && result.kind === 'ok') await this.notified(ref);
    return result;
  }

  /** Effects and finished rows of several new keys in one transaction (protocol.md K39); plain table without `notify` only, else `undefined`. */
  commitBatch(input: BatchInput, effects: (tx: Tx, index: number) => Promise<StoredResponse>): Promise<BatchOutcome[] | undefined> {
    return commitBatch(this.ctx, input, effects);
  }

  /** `notify: 'after-commit'` (and Citus): tells the waiters of `ref`'s key that it changed (protocol.md K17). */
  private async notified(ref: KeyRef): Promise<void> {
    if (this.ctx.notifyAfterCommit) await notifyAfterCommit(this.ctx as StoreContext<unknown>, ref.scope, ref.key);
  }

  async extendLease(ref: KeyRef, leaseMs: number): Promise<Fenced> {
    const { rows } = await this.ctx.db.query(this.ctx.sql.extendLease, [ref.scope, ref.key, ref.token, leaseMs]);
    return rows.length > 0 ? { kind: 'ok', value: undefined } : { kind: 'fenced' };
  }

  async countFailure(ref: KeyRef): Promise<Fenced<number>> {
    const { rows } = await this.ctx.db.query(this.ctx.sql.countFailure, [ref.scope, ref.key, ref.token]);
    return rows.length > 0 ? { kind: 'ok', value: Number(rows[0]!.failed_attempts) } : { kind: 'fenced' };
  }

  async release(ref: KeyRef): Promise<Fenced<'released'>> {
    const { rows } = await this.ctx.db.query(this.ctx.sql.release, [ref.scope, ref.key, ref.token]);
    if (rows.length === 0) return { kind: 'fenced' };
    await this.notified(ref);
    return { kind: 'ok', value: 'released' };
  }

  async discard(ref: KeyRef): Promise<Fenced<'deleted' | 'released'>> {
    const { rows } = await this.ctx.db.query(this.ctx.sql.discard, [ref.scope, ref.key, ref.token]);
    if (rows.length === 0) return this.release(ref);
    await this.notified(ref);
    return { kind: 'ok', value: 'deleted' };
  }

  async operate(write: OperatorWrite): Promise<Fenced<{ token: number }>> {
    const { scope, key, token } = write.ref;
    const { db, sql } = this.ctx;
    if (write.action === 'release') {
      const row = (await db.query(sql.operatorRelease, [scope, key, token, write.note, write.force === true])).rows[0];
      if (!row) return { kind: 'fenced' };
      await this.notified(write.ref);
      return { kind: 'ok', value: { token: Number(row.lock_version) } };
    }
    const old = (await db.query(sql.operatorBlob, [scope, key, token])).rows[0];
    if (!old) return { kind: 'fenced' };
    const row = (await db.query(sql.operatorForget, [scope, key, token, write.note])).rows[0];
    if (!row) return { kind: 'fenced' };
    await this.notified(write.ref);
    // The forgotten response's blob is dead (protocol.md K14), as after a replacement past retention.
    if (old.response_body_ref) await this.ctx.blobs.delete([blobRef(old, scope, key)]).catch(() => undefined);
    return { kind: 'ok', value: { token: Number(row.lock_version) } };
  }

  async get(scope: string, key: string, retentionMs: number): Promise<KeyRecord | undefined> {
    const row = (await this.ctx.db.query(this.ctx.sql.read, [scope, key, retentionMs])).rows[0];
    if (!row || row.retention_expired === true) return undefined;
    return readRecord(this.ctx, row, scope, key);
  }

  async saveRequest(ref: KeyRef, request: RequestSnapshot): Promise<Fenced> {
    const { rows } = await this.ctx.db.query(this.ctx.sql.saveRequest, [ref.scope, ref.key, ref.token, encodeSnapshot(request)]);
    return rows.length > 0 ? { kind: 'ok', value: undefined } : { kind: 'fenced' };
  }

  async discardAbandoned(ref: KeyRef): Promise<Fenced> {
    const { rows } = await this.ctx.db.query(this.ctx.sql.discardAbandoned, [ref.scope, ref.key, ref.token]);
    return rows.length > 0 ? { kind: 'ok', value: undefined } : { kind: 'fenced' };
  }

  async listAbandoned(options: { limit: number; graceMs: number; retentionMs: number }): Promise<AbandonedKey[]> {
    const params = [Math.max(0, Math.floor(options.graceMs)), options.retentionMs, options.limit];
    const { rows } = await this.ctx.db.query(this.ctx.sql.listAbandoned, params);
    return rows.map((row) => {
      const abandoned: AbandonedKey = { record: toRecord(row, String(row.scope), String(row.key)) };
      const request = decodeSnapshot(row.request);
      if (request) abandoned.request = request;
      return abandoned;
    });
  }

  /**
   * Deletes rows past retention (protocol.md K6): rows created at or before `now() - retentionMs`
   * (database clock, fixed when the sweep starts) whose lease is not valid. A plain table is
   * swept in batches by key range, oldest first, skipping rows locked right now; a partitioned
   * one by dropping each partition whose whole day is past retention (one statement each,
   * kept while a lease in it is valid); in Citus mode one batch on every shard at once,
   * skipping locked rows on each. Safe to run from several hosts at once: no row is
   * deleted twice and no sweeper waits on a live claim.
   *
   * @returns the number of rows deleted
   * @throws {InvalidOptionError} for a batch size below 1
   */
  async sweep(options: SweepOptions = {}): Promise<number> {
    return (await sweepReport(this.ctx, options)).deleted;
  }

  /** {@link sweep} with the full report: cutoff, batches, partitions dropped and kept, time. */
  sweepReport(options: SweepOptions = {}): Promise<SweepReport> {
    return sweepReport(this.ctx, options);
  }

  /**
   * What a sweep would delete now, without deleting (dry run).
   * @param retentionMs @default 86_400_000 (24 h)
   */
  sweepPlan(retentionMs: number = DEFAULT_RETENTION_MS): Promise<SweepPlan> {
    return sweepPlan(this.ctx, retentionMs);
  }

  /**
   * Everything stored about one key, past retention or not (`idem inspect`); the response is
   * summarised (status, headers, body size).
   * @param retentionMs only to report `retentionExpired` @default 86_400_000 (24 h)
   */
  inspect(scope: string, key: string, retentionMs: number = DEFAULT_RETENTION_MS): Promise<KeyInspection | undefined> {
    return inspect(this.ctx, scope, key, retentionMs);
  }

  /**
   * Table health (`idem stats`): rows by state, oldest row, rows past retention not yet swept,
   * abandoned keys (lease over, within retention), live leases; partitions in partitioned mode.
   * @param retentionMs @default 86_400_000 (24 h)
   */
  stats(retentionMs: number = DEFAULT_RETENTION_MS): Promise<StoreStats> {
    return stats(this.ctx, retentionMs);
  }

  /**
   * What `idem dashboard` shows: {@link stats}, keys of the last 24 h by hour and state, and up
   * to `limit` stuck, oldest and past-retention keys. Read-only; no bodies, no credentials.
   * @param retentionMs @default 86_400_000 (24 h)
   * @param limit rows per list @default 20
   */
  dashboard(retentionMs: number = DEFAULT_RETENTION_MS, limit = 20): Promise<DashboardData> {
    return dashboard(this.ctx, retentionMs, limit);
  }

  /** {@link inspect} for the dashboard: phase names instead of phase results (which may hold business data). */
  dashboardInspect(scope: string, key: string, retentionMs: number = DEFAULT_RETENTION_MS) {
    return dashboardInspect(this.ctx, scope, key, retentionMs);
  }
}
