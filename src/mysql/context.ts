/**
 * What the parts of the MySQL store share (store.ts, maintenance.ts, operator.ts, dashboard.ts,
 * wait.ts): the table's statements, the executor under the deadline, the response reader, and
 * how values are bound.
 */
import type { MySqlConnectionLike } from './client.js';
import type { MySqlExecutor } from './executor.js';
import type { ResponseReader } from './rows.js';
import type { MySqlStatements } from './sql.js';

/** One MySQL store's table and connections. */
export interface MySqlContext {
  readonly table: string;
  readonly sql: MySqlStatements;
  readonly db: MySqlExecutor<MySqlConnectionLike>;
  readonly reader: ResponseReader;
}

/** Microseconds of `ms`, as the statements' intervals take them. */
export const us = (ms: number): number => Math.round(ms * 1000);
/** Scopes and keys are bound as their UTF-8 bytes, whatever the connection's character set. */
export const b = (value: string): Buffer => Buffer.from(value, 'utf8');
/** VARBINARY(1020) of the key table. */
export const MAX_ID_BYTES = 1020;

/** A new fencing token (sql.ts `drawToken`). */
export async function drawToken(ctx: MySqlContext): Promise<number> {
  return Number((await ctx.db.write(ctx.sql.drawToken)).insertId);
}

/** `[database, table]` of the key table; database null for the connection's own. */
export function tableParts(table: string): [string | null, string] {
  const [database, name] = table.includes('.') ? table.split('.') : [null, table];
  return [database ?? null, name!];
}
