/** Partitioned mode's daily partitions: created ahead by `maintain`, dropped past retention by the sweep. */
import { InvalidOptionError } from '../core/errors.js';
import type { StoreContext } from './context.js';
import type { PartitionedStatements } from './sql.js';

/**
 * The partitioned statements, or an error naming `what` on a plain-table store.
 * @throws {InvalidOptionError} on a plain-table store
 */
export function requirePartitioned(ctx: StoreContext, what: string): PartitionedStatements {
  if (!ctx.psql) throw new InvalidOptionError(`${what}: the store is not partitioned (option partitioned)`);
  return ctx.psql;
}

/** See `PostgresStore.maintain`. */
export async function maintain(ctx: StoreContext): Promise<string[]> {
  const psql = requirePartitioned(ctx, 'maintain');
  const { maintenance: db } = ctx;
  const today = String((await db.query(psql.today)).rows[0]!.day);
  const existing = new Set((await db.query(psql.listPartitions, [ctx.table, 0])).rows.map((r) => String(r.name)));
  const created: string[] = [];
  for (let offset = -1; offset <= ctx.partitioning!.daysAhead; offset++) {
    const day = addDays(today, offset);
    const name = partitionName(ctx.table, day);
    if (existing.has(name)) continue;
    await db.transaction(async (tx) => {
      await db.queryOn(tx, ctx.sql.migrate[0]!, [ctx.table]); // one maintainer at a time
      await db.queryOn(tx, psql.createPartition(name, day, addDays(day, 1)));
    });
    created.push(name);
  }
  return created;
}

/** The partitions (by name, oldest first) whose whole day is past `retentionMs`. */
export async function expiredPartitions(ctx: StoreContext, retentionMs: number): Promise<string[]> {
  const rows = (await ctx.maintenance.query(requirePartitioned(ctx, 'sweep').listPartitions, [ctx.table, retentionMs])).rows;
  return rows.filter((r) => r.expired === true).map((r) => String(r.name));
}

/** Every partition of the table, oldest first, with its day and whether it is past `retentionMs`. */
export async function listPartitions(ctx: StoreContext, retentionMs: number): Promise<Array<{ name: string; day: string; expired: boolean }>> {
  const rows = (await ctx.maintenance.query(requirePartitioned(ctx, 'stats').listPartitions, [ctx.table, retentionMs])).rows;
  return rows.map((r) => ({ name: String(r.name), day: String(r.day), expired: r.expired === true }));
}

/**
 * Drops one expired partition in its own transaction: lock it against writes (bounded by
 * the lock timeout), keep it if a lease in it is still valid, else DROP it.
 *
 * @returns the rows it held, or undefined when it was kept
 */
export async function dropPartition(ctx: StoreContext, name: string): Promise<number | undefined> {
  const psql = requirePartitioned(ctx, 'sweep');
  const { maintenance: db } = ctx;
  try {
    return await db.transaction(async (tx) => {
      await db.queryOn(tx, psql.setLockTimeout, [`${ctx.partitioning!.dropLockTimeoutMs}ms`]);
      await db.queryOn(tx, psql.lockPartition(name));
      const counted = (await db.queryOn(tx, psql.partitionRows(name))).rows[0]!;
      if (Number(counted.live) > 0) return undefined;
      await db.queryOn(tx, psql.dropPartition(name));
      return Number(counted.n);
    });
  } catch (error) {
    // 55P03 lock_not_available: busy; 42P01: another sweeper dropped it first.
    const code = (error as { code?: string }).code;
    if (code === '55P03' || code === '42P01') return undefined;
    throw error;
  }
}

/** `<table>_pYYYYMMDD`, without schema (the partition lives in the table's schema). */
function partitionName(table: string, day: string): string {
  return `${table.split('.').pop()!}_p${day.replaceAll('-', '')}`;
}

/** `day` (YYYY-MM-DD) plus `n` days, as YYYY-MM-DD (UTC calendar arithmetic). */
function addDays(day: string, n: number): string {
  const d = new Date(`${day}T00:00:00Z`);
  d.setUTCDate(d.getUTCDate() + n);
  return d.toISOString().slice(0, 10);
}
