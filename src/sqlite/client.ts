/**
 * The slice of each SQLite client the SQLite store uses, declared here so that idem never imports
 * a driver at run time: the user's database is passed in, and a phase's `tx` is typed as the
 * user's own.
 *
 * Two shapes fit every client idem supports:
 * - **synchronous** ({@link SqliteDatabaseLike}): `prepare(sql).all(...params)` and `exec(sql)`:
 *   `DatabaseSync` of `node:sqlite` (Node 22.13+, 24), better-sqlite3's `Database` (v12), and
 *   `Database` of `bun:sqlite`. A phase's `tx` is the database itself, inside `BEGIN IMMEDIATE`.
 * - **asynchronous** ({@link LibsqlClientLike}): `execute({ sql, args })` and
 *   `transaction('write')`: `@libsql/client` on a local `file:` URL. A phase's `tx` is libSQL's
 *   `Transaction` (its `transaction('write')` is `BEGIN IMMEDIATE`).
 */

/** A prepared statement of a synchronous client: rows as objects keyed by column name. */
export interface SqliteStatementLike {
  all(...params: unknown[]): unknown[];
  run(...params: unknown[]): unknown;
  /** better-sqlite3: false for a statement that returns no rows, which it runs only by `run`. */
  readonly reader?: boolean;
}

/** `node:sqlite`'s `DatabaseSync`, better-sqlite3's `Database` or `bun:sqlite`'s `Database`. */
export interface SqliteDatabaseLike {
  prepare(sql: string): SqliteStatementLike;
  /** Runs statements that return no rows (BEGIN, COMMIT, DDL, PRAGMA settings). */
  exec(sql: string): unknown;
}

/** What libSQL's `execute` resolves to: rows as objects keyed by column name. */
export interface LibsqlResultSetLike {
  rows: ArrayLike<unknown>;
}

/** A value idem binds to a statement: text, numbers, NULL, bytes. */
export type LibsqlValue = null | string | number | bigint | Uint8Array;

/** Something libSQL runs statements on: its `Client` or a `Transaction`. */
export interface LibsqlExecutorLike {
  execute(statement: { sql: string; args: LibsqlValue[] }): Promise<LibsqlResultSetLike>;
}

/** libSQL's `Transaction`: its own connection, held until commit or rollback. */
export interface LibsqlTransactionLike extends LibsqlExecutorLike {
  commit(): Promise<void>;
  rollback(): Promise<void>;
  close(): void;
}

/**
 * `@libsql/client`'s `Client` (`createClient({ url: 'file:…', timeout })`).
 * @typeParam T its `Transaction`, a phase's `tx`
 */
export interface LibsqlClientLike<T extends LibsqlTransactionLike = LibsqlTransactionLike> extends LibsqlExecutorLike {
  transaction(mode: 'write'): Promise<T>;
}

/** Any client the SQLite store takes. */
export type SqliteClient = SqliteDatabaseLike | LibsqlClientLike;

/** A phase's `tx` on client `C`: libSQL's `Transaction`, or the synchronous database itself. */
export type SqliteTxOf<C> = C extends LibsqlClientLike<infer T> ? T : C;

/** Whether `client` is libSQL's (asynchronous) client. */
export function isLibsqlClient(client: unknown): client is LibsqlClientLike {
  const c = client as Partial<LibsqlClientLike> | null;
  return typeof c?.execute === 'function' && typeof c.transaction === 'function';
}

/** Whether `client` is a synchronous SQLite database. */
export function isSqliteDatabase(client: unknown): client is SqliteDatabaseLike {
  const c = client as Partial<SqliteDatabaseLike> | null;
  return typeof c?.prepare === 'function' && typeof c.exec === 'function';
}

/** One row as idem reads it. */
export type SqliteRow = Record<string, unknown>;
