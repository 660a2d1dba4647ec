/**
 * The MySQL store's table upkeep (the `maintenance` capability, protocol.md K6): migration under a
 * named lock, the sweep in batches at READ COMMITTED with its dry run, and the token table's trim.
 */
import { DEFAULT_RETENTION_MS } from '../core/constants.js';
import { type SweepOptions, type SweepPlan, type SweepReport, sweepBatches, sweepSettings } from '../store/sweep.js';
import type { MySqlResultHeader, MySqlRow } from './client.js';
import { type MySqlContext, tableParts, us } from './context.js';

/** See `MySqlStore.migrate`. */
export async function migrate(ctx: MySqlContext): Promise<{ table: 'created' | 'exists'; partitionsCreated: string[] }> {
  const [database, name] = tableParts(ctx.table);
  const conn = await ctx.db.checkout();
  const lock = `idem:migrate:${ctx.table}`;
  try {
    await ctx.db.on(conn, ctx.sql.lockMigration, [lock], false);
    try {
      const existed = Number((await ctx.db.on<MySqlRow[]>(conn, ctx.sql.tableExists, [name, database], false))[0]!.n) > 0;
      for (const statement of [ctx.sql.createTable, ctx.sql.createBlobs, ctx.sql.createTokens]) await ctx.db.on(conn, statement, [], false);
      // A table made before operator actions gets their note column (protocol.md K40).
      if (Number((await ctx.db.on<MySqlRow[]>(conn, ctx.sql.noteColumn, [name, database], false))[0]!.n) === 0) {
        await ctx.db.on(conn, ctx.sql.addNoteColumn, [], false);
      }
      return { table: existed ? 'exists' : 'created', partitionsCreated: [] };
    } finally {
      await ctx.db.on(conn, ctx.sql.unlockMigration, [lock], false);
    }
  } finally {
    ctx.db.release(conn);
  }
}

/** See `MySqlStore.tableMode`. */
export async function tableMode(ctx: MySqlContext): Promise<'plain' | undefined> {
  const [database, name] = tableParts(ctx.table);
  return Number((await ctx.db.rows(ctx.sql.tableExists, [name, database], false))[0]!.n) > 0 ? 'plain' : undefined;
}

/** See `MySqlStore.sweepReport`. */
export async function sweepReport(ctx: MySqlContext, options: SweepOptions): Promise<SweepReport> {
  const { retentionMs, batchSize, started, deadline } = sweepSettings(options);
  const { cutoff, cutoffMs } = await cutoffOf(ctx, retentionMs);
  const { timedOut, ...progress } = await sweepBatches({ batchSize, deadline }, options.onProgress, async (size) => {
    const conn = await ctx.db.checkout();
    try {
      await ctx.db.on(conn, ctx.sql.readCommitted, [], false);
      const deleted = (await ctx.db.on<MySqlResultHeader>(conn, ctx.sql.sweepBatch, [cutoff, size], false)).affectedRows;
      ctx.db.release(conn);
      return deleted;
    } catch (error) {
      ctx.db.destroy(conn);
      throw error;
    }
  });
  await trimTokens(ctx, batchSize);
  return { ...progress, cutoff: new Date(cutoffMs), timedOut, keptPartitions: [], durationMs: Date.now() - started };
}

/** Deletes every token row but the highest (which keeps the counter where it is). */
async function trimTokens(ctx: MySqlContext, batchSize: number): Promise<void> {
  const top = (await ctx.db.rows(ctx.sql.topToken, [], false))[0]?.top;
  if (top === null || top === undefined) return;
  while ((await ctx.db.write(ctx.sql.trimTokens, [top, batchSize], false)).affectedRows >= batchSize);
}

async function cutoffOf(ctx: MySqlContext, retentionMs: number): Promise<{ cutoff: string; cutoffMs: number }> {
  const row = (await ctx.db.rows(ctx.sql.sweepCutoff, [us(retentionMs), us(retentionMs)], false))[0]!;
  return { cutoff: String(row.cutoff), cutoffMs: Number(row.cutoff_ms) };
}

/** See `MySqlStore.sweepPlan`. */
export async function sweepPlan(ctx: MySqlContext, retentionMs: number = DEFAULT_RETENTION_MS): Promise<SweepPlan> {
  const { cutoff, cutoffMs } = await cutoffOf(ctx, retentionMs);
  const row = (await ctx.db.rows(ctx.sql.sweepPlan, [cutoff], false))[0]!;
  return { cutoff: new Date(cutoffMs), expired: Number(row.expired), sweepable: Number(row.sweepable), expiredPartitions: [] };
}
