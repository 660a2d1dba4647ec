/** Retention (protocol.md K6): the sweep, its report and its dry run. */
import { DEFAULT_RETENTION_MS } from '../core/constants.js';
import { InvalidOptionError } from '../core/errors.js';
import type { StoreContext } from './options.js';
import { sweepShards } from './citus.js';
import { dropPartition, expiredPartitions } from './partitions.js';

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

/** Result of `PostgresStore.sweepReport`. */
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

/** What a sweep would find now; see `PostgresStore.sweepPlan`. */
export interface SweepPlan {
  cutoff: Date;
  /** Rows created at or before the cutoff. */
  expired: number;
  /** Of those, rows whose lease is not valid: what a sweep deletes. */
  sweepable: number;
  /** Partitioned mode: partitions whose whole day is at or before the cutoff. */
  expiredPartitions: string[];
}

/** Options of `PostgresStore.sweep`. */
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

/** The retention cutoff in epoch µs (database clock), as text: exact, unlike a JS Date. */
async function cutoffUs(ctx: StoreContext, retentionMs: number): Promise<string> {
  return String((await ctx.maintenance.query(ctx.sql.sweepCutoff, [retentionMs])).rows[0]!.cutoff_us);
}

const usToDate = (us: string) => new Date(Number(BigInt(us) / 1000n));

/**
 * A sweep's options with their defaults, checked, and its start and deadline (every SQL store's sweep).
 * @throws {InvalidOptionError} for a batch size below 1 or a negative retention
 */
export function sweepSettings(options: SweepOptions): { retentionMs: number; batchSize: number; started: number; deadline: number } {
  const retentionMs = options.retentionMs ?? DEFAULT_RETENTION_MS;
  const batchSize = options.batchSize ?? 1000;
  if (!(Number.isInteger(batchSize) && batchSize >= 1)) throw new InvalidOptionError('sweep: batchSize must be an integer >= 1');
  if (!(retentionMs >= 0)) throw new InvalidOptionError('sweep: retentionMs must be >= 0');
  const started = Date.now();
  return { retentionMs, batchSize, started, deadline: started + (options.maxDurationMs ?? Infinity) };
}

/**
 * See `PostgresStore.sweepReport`.
 * @throws {InvalidOptionError} for a batch size below 1 or a negative retention
 */
export async function sweepReport(ctx: StoreContext, options: SweepOptions = {}): Promise<SweepReport> {
  const { retentionMs, batchSize, started, deadline } = sweepSettings(options);
  const cutoff = await cutoffUs(ctx, retentionMs);
  const progress: SweepProgress = { deleted: 0, scanned: 0, batches: 0, droppedPartitions: [] };
  const report = (timedOut: boolean, keptPartitions: string[] = []): SweepReport => ({
    ...progress,
    cutoff: usToDate(cutoff),
    timedOut,
    keptPartitions,
    durationMs: Date.now() - started,
  });
  if (ctx.psql) {
    const kept: string[] = [];
    for (const part of await expiredPartitions(ctx, retentionMs)) {
      if (Date.now() >= deadline) return report(true, kept);
      const dropped = await dropPartition(ctx, part);
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
  if (ctx.citus) {
    // Citus mode: one batch on every shard per statement, until no shard's batch is full.
    while (Date.now() < deadline) {
      const batch = await sweepShards(ctx, cutoff, batchSize);
      progress.batches++;
      progress.deleted += batch.deleted;
      progress.scanned += batch.scanned;
      options.onProgress?.({ ...progress });
      if (batch.more === 0) return report(false);
    }
    return report(true);
  }
  // Cursor (created_at µs, scope, key): starts before any row (year 1653), moves after each batch.
  let cursor: [string, string, string] = ['-10000000000000000', '', ''];
  while (Date.now() < deadline) {
    const row = (await ctx.maintenance.query(ctx.sql.sweepBatch, [cutoff, ...cursor, batchSize])).rows[0]!;
    progress.batches++;
    progress.deleted += Number(row.deleted);
    progress.scanned += Number(row.scanned);
    options.onProgress?.({ ...progress });
    if (row.created_us === null || row.created_us === undefined || Number(row.scanned) < batchSize) return report(false);
    cursor = [String(row.created_us), String(row.scope), String(row.key)];
  }
  return report(true);
}

/** See `PostgresStore.sweepPlan`. */
export async function sweepPlan(ctx: StoreContext, retentionMs: number): Promise<SweepPlan> {
  const cutoff = await cutoffUs(ctx, retentionMs);
  const row = (await ctx.maintenance.query(ctx.sql.sweepPlan, [cutoff])).rows[0]!;
  return {
    cutoff: usToDate(cutoff),
    expired: Number(row.expired),
    sweepable: Number(row.sweepable),
    expiredPartitions: ctx.psql ? await expiredPartitions(ctx, retentionMs) : [],
  };
}
