/**
 * The SQLite store's table upkeep (the `maintenance` capability, protocol.md K6, K51): the
 * migration (WAL on, tables and indexes if missing), and the sweep in batches with its dry run.
 */
import { DEFAULT_RETENTION_MS } from '../core/constants.js';
import { type SweepOptions, type SweepPlan, type SweepReport, sweepBatches, sweepSettings } from '../store/sweep.js';
import { type SqliteContext, type SqliteRowsContext, ms } from './context.js';

/**
 * See `SqliteStore.migrate`. `CREATE … IF NOT EXISTS` in one write transaction: processes
 * starting at once take turns on the file's write lock, the later ones find the tables.
 */
export async function migrate(ctx: SqliteContext): Promise<{ table: 'created' | 'exists'; partitionsCreated: string[] }> {
  const mode = (await ctx.db.rows(ctx.sql.wal))[0];
  const journal = mode ? String(Object.values(mode)[0]).toLowerCase() : '';
  // An in-memory database reports `memory`: one connection, nothing to share.
  if (journal !== 'wal' && journal !== 'memory') throw new Error(`idem/sqlite: could not turn on WAL (journal_mode is ${journal})`);
  return ctx.db.transaction(async (run) => {
    const existed = Number((await run(ctx.sql.tableExists, [ctx.table]))[0]!.n) > 0;
    for (const statement of ctx.sql.create) await run(statement);
    return { table: existed ? 'exists' : 'created', partitionsCreated: [] };
  });
}

/** See `SqliteStore.tableMode`. */
export async function tableMode(ctx: SqliteContext): Promise<'plain' | undefined> {
  return Number((await ctx.db.rows(ctx.sql.tableExists, [ctx.table]))[0]!.n) > 0 ? 'plain' : undefined;
}

async function cutoffOf(ctx: SqliteRowsContext, retentionMs: number): Promise<number> {
  return Number((await ctx.db.rows(ctx.sql.sweepCutoff, [ms(retentionMs)]))[0]!.cutoff);
}

/**
 * See `SqliteStore.sweepReport`: each batch one DELETE of its own (autocommit), so the file's
 * write lock is held for one batch at a time and claims of other processes get their turn
 * between batches.
 */
export async function sweepReport(ctx: SqliteRowsContext, options: SweepOptions): Promise<SweepReport> {
  const { retentionMs, batchSize, started, deadline } = sweepSettings(options);
  const cutoff = await cutoffOf(ctx, retentionMs);
  const { timedOut, ...progress } = await sweepBatches(
    { batchSize, deadline },
    options.onProgress,
    async (size) => (await ctx.db.rows(ctx.sql.sweepBatch, [cutoff, size])).length,
  );
  return { ...progress, cutoff: new Date(cutoff), timedOut, keptPartitions: [], durationMs: Date.now() - started };
}

/** See `SqliteStore.sweepPlan`. */
export async function sweepPlan(ctx: SqliteRowsContext, retentionMs: number = DEFAULT_RETENTION_MS): Promise<SweepPlan> {
  const cutoff = await cutoffOf(ctx, retentionMs);
  const row = (await ctx.db.rows(ctx.sql.sweepPlan, [cutoff]))[0]!;
  return { cutoff: new Date(cutoff), expired: Number(row.expired), sweepable: Number(row.sweepable), expiredPartitions: [] };
}
