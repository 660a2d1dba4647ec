/**
 * The slice of mysql2's promise API (`mysql2/promise`) the MySQL store uses, declared here so
 * that idem never imports mysql2 at run time: the user's `Pool` is passed in, and a phase's
 * `tx` is the `PoolConnection` it checked out, typed as the user's own.
 */

/** One query as mysql2 takes it: the statement, its `?` values, and the row format idem reads. */
export interface MySqlQueryOptions {
  sql: string;
  values?: unknown[];
  /** Rows as objects keyed by column name, whatever the pool's own setting. */
  rowsAsArray?: boolean;
  nestTables?: boolean;
  /** mysql2's own conversion of column values (a pool's custom `typeCast` is not applied to idem's statements). */
  typeCast?: boolean;
}

/** What a write returns (mysql2's `ResultSetHeader`). */
export interface MySqlResultHeader {
  affectedRows: number;
  insertId: number | string | bigint;
  /** For an UPDATE: `Rows matched: n  Changed: m  Warnings: w`. */
  info?: string;
}

/** A connection checked out of the pool: mysql2's `PoolConnection` (promise API). */
export interface MySqlConnectionLike {
  query(options: MySqlQueryOptions): Promise<[unknown, unknown]>;
  /** Back to the pool. */
  release(): void;
  /** Closed and removed from the pool: a connection whose protocol state is unknown is never reused. */
  destroy(): void;
  /** The callback connection underneath, which emits `'error'` when its socket breaks. */
  connection?: { on?(event: 'error', listener: (error: Error) => void): unknown };
}

/**
 * A mysql2 promise `Pool` (`mysql.createPool(...)` from `mysql2/promise`, or `.promise()` of a
 * callback pool).
 * @typeParam C the pool's connection type, a phase's `tx`
 */
export interface MySqlPoolLike<C extends MySqlConnectionLike = MySqlConnectionLike> {
  getConnection(): Promise<C>;
}

/** Rows of a SELECT as idem reads them. */
export type MySqlRow = Record<string, unknown>;

/**
 * The rows an UPDATE matched, whether or not it changed them. mysql2 sets `CLIENT_FOUND_ROWS`
 * by default (then `affectedRows` is the rows matched); a pool without that flag reports the rows
 * changed instead, so the server's `info` text (`Rows matched: n`) is read first when present.
 */
export function rowsMatched(header: MySqlResultHeader): number {
  const info = typeof header.info === 'string' ? /Rows matched:\s*(\d+)/.exec(header.info) : null;
  return info ? Number(info[1]) : Number(header.affectedRows);
}

/** Marks a {@link MySqlDriver} (a client other than a bare mysql2 pool). */
export const MYSQL_DRIVER: unique symbol = Symbol.for('idem.mysql.driver');

/**
 * A client over a mysql2 pool whose transactions are its own (an ORM): idem's statements run
 * on the pool outside a phase, and inside one on the connection of the client's transaction,
 * so the fenced recovery point commits with the user's writes (protocol.md K4, K5).
 * @typeParam Tx the client's transaction object, a phase's `tx`
 */
export interface MySqlDriver<Tx> {
  readonly [MYSQL_DRIVER]: true;
  /** For messages. */
  readonly name: string;
  /** The mysql2 promise pool under the client. */
  readonly pool: MySqlPoolLike;
  /** Runs `fn` in the client's transaction: `tx` for the user, `conn` the connection it holds. Commits on resolve, rolls back on throw. */
  transaction<T>(fn: (tx: Tx, conn: MySqlConnectionLike) => Promise<T>): Promise<T>;
}

/** Whether `client` is a {@link MySqlDriver}. */
export function isMySqlDriver(client: unknown): client is MySqlDriver<unknown> {
  return typeof client === 'object' && client !== null && (client as { [MYSQL_DRIVER]?: unknown })[MYSQL_DRIVER] === true;
}
