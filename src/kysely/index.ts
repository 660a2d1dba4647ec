/**
 * `idem/kysely`: the PostgreSQL store on a Kysely instance. A phase's `tx` is Kysely's own
 * `Transaction<DB>`, and idem's fenced recovery-point write runs in that same transaction
 * (protocol.md K4, K5, Q4), so a phase's `tx.insertInto(...)` commits with its recovery point
 * or not at all.
 *
 * Kysely is an optional peer dependency (kysely >= 0.27): this module never imports it; it
 * uses the instance it is given, through the slice of its API declared below. Any PostgreSQL
 * dialect works: `PostgresDialect` on a `pg.Pool`, Kysely's `PGliteDialect`, or another whose
 * rows carry node-postgres's value types (see {@link SqlDriver}). Rows are passed on as the
 * dialect gives them, not copied (PGlite's `int8` is a bigint, which idem reads as it does on
 * a PGlite client; src/postgres/values.ts says how each value type is read).
 *
 * @example
 * ```ts
 * import { Kysely, PostgresDialect } from 'kysely';
 * import { kysely } from 'idem/kysely';
 *
 * const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString }) }) });
 * const store = new PostgresStore({ client: kysely(db) });
 * // in a handler: idem.phase('charge', (tx) => tx.insertInto('charges').values(row).execute())
 * ```
 */
import { type Queryable, type QueryResultLike, SQL_DRIVER, type SqlDriver } from '../postgres/client.js';
import { compiled, type KyselyCompiledQuery, type KyselyQueryResult } from './compiled.js';

export type { KyselyCompiledQuery, KyselyQueryResult };

/** The slice of a Kysely instance or transaction that runs a compiled query. */
export interface KyselyExecutorLike {
  executeQuery(query: KyselyCompiledQuery): Promise<KyselyQueryResult>;
}

/**
 * The slice of `Kysely<DB>` that idem uses; `Tx` is its `Transaction<DB>`.
 * `withoutPlugins()` runs idem's statements past the instance's plugins (a `CamelCasePlugin`
 * would rename the columns idem reads).
 */
export interface KyselyLike<Tx extends KyselyTransactionLike> extends KyselyExecutorLike {
  transaction(): { execute<T>(callback: (trx: Tx) => Promise<T>): Promise<T> };
  withoutPlugins(): KyselyExecutorLike;
}

/** The slice of Kysely's `Transaction<DB>` that idem uses. */
export interface KyselyTransactionLike extends KyselyExecutorLike {
  withoutPlugins(): KyselyExecutorLike;
}

/** Runs `text` on `db` (plugins off) with Kysely's result as `{ rows, rowCount }`. */
async function run(db: KyselyExecutorLike, text: string, params: unknown[] | undefined): Promise<QueryResultLike> {
  const result = await db.executeQuery(compiled(text, params));
  const rows = result.rows as Array<Record<string, unknown>>;
  return { rows, rowCount: result.numAffectedRows === undefined ? rows.length : Number(result.numAffectedRows) };
}

/**
 * The driver for `new PostgresStore({ client: kysely(db) })`: idem's statements through
 * `db.executeQuery`, a phase's transaction through `db.transaction().execute(...)`, whose
 * `Transaction<DB>` the phase gets as `tx`. No `listen`: `notify: true` (wait mode) needs a
 * `pg.Pool` or PGlite client.
 *
 * @param db a `Kysely<DB>` on a PostgreSQL dialect (not a `Transaction`)
 * @returns a driver whose transaction type is `Transaction<DB>`
 * @throws {TypeError} when `db` has no `executeQuery`, `transaction` and `withoutPlugins`
 */
export function kysely<Tx extends KyselyTransactionLike>(db: KyselyLike<Tx>): SqlDriver<Tx> {
  const valid = db && ['executeQuery', 'transaction', 'withoutPlugins'].every((m) => typeof (db as unknown as Record<string, unknown>)[m] === 'function');
  if (!valid) throw new TypeError('idem/kysely: pass a Kysely instance (new Kysely({ dialect }))');
  if ((db as { isTransaction?: unknown }).isTransaction === true) {
    throw new TypeError('idem/kysely: pass the Kysely instance, not a Transaction (idem opens one per phase)');
  }
  const plain = db.withoutPlugins();
  return {
    kind: SQL_DRIVER,
    name: 'Kysely',
    query: (text, params) => run(plain, text, params),
    transaction: (fn) =>
      db.transaction().execute((trx) => {
        const inner = trx.withoutPlugins();
        const sql: Queryable = { query: (text, params) => run(inner, text, params) };
        return fn(trx, sql);
      }),
  };
}
