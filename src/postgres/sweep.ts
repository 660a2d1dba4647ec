/** Retention (protocol.md K6) on PostgreSQL: the sweep, its report and its dry run. */
import { type SweepOptions, type SweepPlan, type SweepProgress, type SweepReport, sweepSettings } from '../store/sweep.js';
import type { StoreContext } from './context.js';
import { sweepShards } from './citus.js';
import { dropPartition, expiredPartitions } from './partitions.js';

/** The retention cutoff in epoch µs (database clock), as text: exact, unlike a JS Date. */
async function cutoffUs(ctx: StoreContext, retentionMs: number): Promise<string> {
  return String((await ctx.maintenance.query(ctx.sql.sweepCutoff, [retentionMs])).rows[0]!.cutoff_us);
}

const usToDate = (us: string) => new Date(Number(BigInt(us) / 1000n));

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
