/** Creating and upgrading the table, and telling a plain table from a partitioned one. */
import { InvalidOptionError } from '../core/errors.js';
import { checkDistribution } from './citus.js';
import type { StoreContext } from './context.js';
import { maintain } from './partitions.js';

/** See `PostgresStore.migrate`. */
export async function migrate(ctx: StoreContext): Promise<{ table: 'created' | 'exists'; partitionsCreated: string[] }> {
  const { maintenance: db } = ctx;
  const [lock, ...ddl] = (ctx.psql ?? ctx.sql).migrate;
  // A Citus distributed table needs Citus mode's statements, and Citus mode needs Citus.
  await checkDistribution(ctx);
  const table = await db.transaction(async (tx) => {
    await db.queryOn(tx, lock!, [ctx.table]);
    const kind = (await db.queryOn(tx, ctx.sql.tableKind, [ctx.table])).rows[0]?.kind;
    if (kind !== undefined) checkKind(ctx, String(kind));
    for (const statement of ddl) await db.queryOn(tx, statement);
    return kind === undefined ? ('created' as const) : ('exists' as const);
  });
  const partitionsCreated = ctx.psql ? await maintain(ctx) : [];
  return { table, partitionsCreated };
}

/** See `PostgresStore.tableMode`. */
export async function tableMode(ctx: StoreContext): Promise<'plain' | 'partitioned' | undefined> {
  const kind = (await ctx.maintenance.query(ctx.sql.tableKind, [ctx.table])).rows[0]?.kind;
  return kind === undefined ? undefined : kind === 'p' ? 'partitioned' : 'plain';
}

/**
 * Refuses a table made in the other mode.
 * @throws {InvalidOptionError} plain table for a partitioned store, or the reverse
 */
function checkKind(ctx: StoreContext, kind: string): void {
  if (ctx.psql && kind !== 'p') {
    throw new InvalidOptionError(
      `Table ${ctx.table} exists and is not partitioned: migrate it first (docs/guides/operations.md, "Partitioned mode"), or drop the partitioned option`,
    );
  }
  if (!ctx.psql && kind === 'p') {
    throw new InvalidOptionError(`Table ${ctx.table} is partitioned: open the store with { partitioned: true }`);
  }
}
