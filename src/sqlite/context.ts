/**
 * What the parts of the SQLite store share (store.ts, maintenance.ts, operator.ts): the table's
 * statements, the executor and how a token is drawn.
 */
import type { SqliteExecutor, SqliteRun } from './executor.js';
import type { SqliteStatements } from './sql.js';

/** A table and a way to run one statement on it: what the reads and the sweep need (the D1 store has them too, protocol.md K57). */
export interface SqliteRowsContext {
  readonly table: string;
  readonly sql: SqliteStatements;
  readonly db: Pick<SqliteExecutor<unknown>, 'rows'>;
}

/** One SQLite store's table and client. */
export interface SqliteContext extends SqliteRowsContext {
  readonly db: SqliteExecutor<unknown>;
}

/** Whole milliseconds, as the statements' intervals take them. */
export const ms = (value: number): number => Math.round(value);

/** A new fencing token, inside a write transaction (sql.ts `drawToken`). */
export async function drawToken(ctx: SqliteContext, run: SqliteRun): Promise<number> {
  const row = (await run(ctx.sql.drawToken))[0];
  if (!row) throw new Error(`idem/sqlite: the token table of ${ctx.table} is empty: run migrate()`);
  return Number(row.n);
}
