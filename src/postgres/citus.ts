/**
 * Citus mode (`distributed: 'citus'`): distributing the key table and its blob table by
 * `scope`, checking a table's distribution against the store's mode, and the per-shard sweep.
 * The statements are in sql/citus.ts.
 */
import { InvalidOptionError } from '../core/errors.js';
import type { StoreContext } from './context.js';
import type { Queryable } from './client.js';
import { type CitusStatements, citusCatalog } from './sql.js';

/** What `PostgresStore.distribute` did. */
export interface DistributeResult {
  /** The key table: `distributed` now, or `exists` (it already was, by scope). */
  table: 'distributed' | 'exists';
  /** `<table>_blobs`: `distributed` now (co-located with the key table), or `exists`. */
  blobs: 'distributed' | 'exists';
  /** The key table's Citus co-location group id. */
  colocationId: number;
  /** The call that co-locates a business table of the tenant with the key table (`<your_table>`, `<tenant column>` to fill in). */
  colocateHint: string;
}

/** The Citus extension's version, or undefined without it. */
export async function citusVersion(ctx: StoreContext): Promise<string | undefined> {
  const row = (await ctx.maintenance.query(citusCatalog.extension)).rows[0];
  return row ? String(row.extversion) : undefined;
}

/**
 * How `table` is distributed, or undefined for a table Citus does not distribute (or no Citus).
 * Works in either mode: the store's own mode check in `migrate`.
 */
export async function distributionOf(ctx: StoreContext, table: string): Promise<{ method: string; column: string | null; colocationId: number } | undefined> {
  if ((await citusVersion(ctx)) === undefined) return undefined;
  const row = (await ctx.maintenance.query(citusCatalog.distribution, [table])).rows[0];
  if (row?.method !== 'h') return undefined;
  return { method: String(row.method), column: row.column === null ? null : String(row.column), colocationId: Number(row.colocationid) };
}

/**
 * `migrate`'s check of the table against the store's mode, before any DDL.
 * @throws {InvalidOptionError} a Citus-mode store without the Citus extension, a distributed
 *   table opened without `distributed: 'citus'`, or one distributed by another column
 */
export async function checkDistribution(ctx: StoreContext): Promise<void> {
  const version = await citusVersion(ctx);
  if (ctx.citus && version === undefined) {
    throw new InvalidOptionError(`idem/postgres: distributed: 'citus', but the database has no citus extension (connect to the coordinator)`);
  }
  if (version === undefined) return;
  const dist = await distributionOf(ctx, ctx.table);
  if (dist && !ctx.citus) {
    throw new InvalidOptionError(`Table ${ctx.table} is distributed by Citus: open the store with { distributed: 'citus' }`);
  }
  if (dist && dist.column !== 'scope') {
    throw new InvalidOptionError(`Table ${ctx.table} is distributed by ${dist.column}, not by scope: idem needs it distributed by scope`);
  }
}

/**
 * See `PostgresStore.distribute`. Both tables in one transaction: the blob table's foreign key
 * to the key table holds only between co-located distributed tables (one per shard pair).
 */
export async function distribute(ctx: StoreContext): Promise<DistributeResult> {
  const citus = citusOf(ctx);
  await checkDistribution(ctx);
  const { maintenance: db } = ctx;
  // Under migrate's lock, checked again inside it: two hosts starting at once distribute once.
  const [lock] = ctx.sql.migrate;
  const hashed = async (tx: Queryable, table: string) => (await db.queryOn(tx, citusCatalog.distribution, [table])).rows.some((row) => row.method === 'h');
  const [table, blobs] = await db.transaction(async (tx) => {
    await db.queryOn(tx, lock!, [ctx.table]);
    const keysBefore = await hashed(tx, ctx.table);
    const blobsBefore = await hashed(tx, `${ctx.table}_blobs`);
    if (!keysBefore) await db.queryOn(tx, citus.distributeKeys);
    if (!blobsBefore) await db.queryOn(tx, citus.distributeBlobs);
    return [keysBefore ? 'exists' : 'distributed', blobsBefore ? 'exists' : 'distributed'] as const;
  });
  const after = (await distributionOf(ctx, ctx.table))!;
  return {
    table,
    blobs,
    colocationId: after.colocationId,
    colocateHint: `SELECT create_distributed_table('<your_table>', '<tenant column>', colocate_with => '${ctx.table}');`,
  };
}

/** One call's outcome of the per-shard sweep. */
export interface ShardBatches {
  deleted: number;
  scanned: number;
  /** Shards whose batch came back full: they may hold more. */
  more: number;
}

/**
 * One batch on every shard at once (sql/citus.ts `sweepShards`).
 * @throws {Error} when a shard's batch failed, with its message
 */
export async function sweepShards(ctx: StoreContext, cutoffUs: string, batchSize: number): Promise<ShardBatches> {
  const rows = (await ctx.maintenance.query(citusOf(ctx).sweepShards, [cutoffUs, batchSize])).rows;
  const out: ShardBatches = { deleted: 0, scanned: 0, more: 0 };
  for (const row of rows) {
    if (row.success !== true) throw new Error(`idem/postgres: sweep of shard ${String(row.shard)} of ${ctx.table} failed: ${String(row.result)}`);
    const [deleted, scanned] = String(row.result).split(',').map(Number) as [number, number];
    out.deleted += deleted;
    out.scanned += scanned;
    if (scanned >= batchSize) out.more++;
  }
  return out;
}

/** @throws {InvalidOptionError} on a store not in Citus mode */
function citusOf(ctx: StoreContext): CitusStatements {
  if (!ctx.citus) throw new InvalidOptionError(`idem/postgres: the store of ${ctx.table} is not in Citus mode (option distributed: 'citus')`);
  return ctx.citus;
}
