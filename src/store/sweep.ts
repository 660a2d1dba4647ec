/**
 * Retention (protocol.md K6), store-neutral: a sweep's options, its progress, its report and
 * its dry run's plan, and the options checked once for every SQL store's sweep.
 */
import { DEFAULT_RETENTION_MS } from '../core/constants.js';
import { InvalidOptionError } from '../core/errors.js';

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

/** Result of a store's `sweepReport` (`PostgresStore`, `MySqlStore`). */
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

/** What a sweep would find now; see a store's `sweepPlan` (`PostgresStore`, `MySqlStore`). */
export interface SweepPlan {
  cutoff: Date;
  /** Rows created at or before the cutoff. */
  expired: number;
  /** Of those, rows whose lease is not valid: what a sweep deletes. */
  sweepable: number;
  /** Partitioned mode: partitions whose whole day is at or before the cutoff. */
  expiredPartitions: string[];
}

/** Options of a store's `sweep` (`PostgresStore`, `MySqlStore`). */
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
 * A plain (row by row) sweep's loop, every SQL store's: `deleteBatch(batchSize)` until a batch
 * deletes fewer than `batchSize` rows or the deadline of {@link sweepSettings} passes (then
 * `timedOut`), reporting progress after each batch.
 */
export async function sweepBatches(
  settings: { batchSize: number; deadline: number },
  onProgress: SweepOptions['onProgress'],
  deleteBatch: (batchSize: number) => Promise<number>,
): Promise<SweepProgress & { timedOut: boolean }> {
  const progress = { deleted: 0, scanned: 0, batches: 0, droppedPartitions: [] as string[] };
  while (Date.now() < settings.deadline) {
    const deleted = await deleteBatch(settings.batchSize);
    progress.batches++;
    progress.deleted += deleted;
    progress.scanned += deleted;
    onProgress?.({ ...progress, droppedPartitions: [] });
    if (deleted < settings.batchSize) return { ...progress, timedOut: false };
  }
  return { ...progress, timedOut: true };
}
