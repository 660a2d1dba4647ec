/**
 * `idem/postgresjs`: the PostgreSQL store on a postgres.js client (the `postgres` package).
 * A phase's `tx` is postgres.js's own `sql` inside `sql.begin`, and idem's fenced write runs in
 * that same transaction (protocol.md K4, K5).
 *
 * @example
 * ```ts
 * import postgres from 'postgres';
 * import { PostgresStore } from 'idem/postgres';
 * import { postgresjs } from 'idem/postgresjs';
 *
 * const sql = postgres(process.env.DATABASE_URL!);
 * const store = new PostgresStore({ client: postgresjs(sql) });
 * // in a handler: await idem.phase('charge', (tx) => tx`INSERT INTO charges ${tx(charge)}`);
 * ```
 */
import { InvalidOptionError } from '../core/errors.js';
import { type Queryable, type QueryResultLike, SQL_DRIVER, type SqlDriver } from '../postgres/client.js';

/** A postgres.js result: the rows, with the command's row count (`count`). */
export interface PostgresJsResult extends ReadonlyArray<Record<string, unknown>> {
  count: number | null;
}

/** The slice of postgres.js's `sql` (and of the `sql` inside `begin`) that idem uses: `unsafe`. */
export interface PostgresJsQueryable {
  unsafe(query: string, parameters?: never[], options?: { prepare?: boolean }): PromiseLike<PostgresJsResult>;
}

/**
 * The slice of a postgres.js client (`postgres(url)`) that idem uses, declared here so that
 * `postgres` stays an optional peer dependency.
 * @typeParam Tx the `sql` that `begin` hands its callback (postgres.js `TransactionSql`)
 */
export interface PostgresJsLike<Tx extends PostgresJsQueryable> extends PostgresJsQueryable {
  begin<T>(fn: (sql: Tx) => T | Promise<T>): Promise<unknown>;
  begin<T>(options: string, fn: (sql: Tx) => T | Promise<T>): Promise<unknown>;
  listen?(channel: string, onnotify: (payload: string) => void, onlisten?: () => void): Promise<{ unlisten(): Promise<void> }>;
  /** The client's parsed options: a `transform` here renames idem's columns, so it is refused. */
  options?: {
    transform?: { column?: { from?: unknown }; value?: { from?: unknown }; row?: { from?: unknown } };
    /** By type oid; Drizzle's postgres-js driver makes json's (114) and jsonb's (3802) the identity. */
    serializers?: Record<string, unknown>;
    /** Seconds a new connection may take to be ready; `0` or `null`: forever (refused). */
    connect_timeout?: number | null;
  };
}

/**
 * Indexes of the parameters that idem's statement `text` casts to `json`/`jsonb` (`$5::jsonb`).
 * idem binds JSON as text; postgres.js serializes a parameter the server types as JSON with
 * `JSON.stringify`, which would store the text as a JSON string. Those parameters are handed
 * over as values whose `toJSON` is the parsed document, so postgres.js writes that document.
 */
const jsonParams = new Map<string, number[]>();
function jsonIndexes(text: string): number[] {
  let found = jsonParams.get(text);
  if (!found) {
    found = [...text.matchAll(/\$(\d+)::jsonb?\b/g)].map((m) => Number(m[1]) - 1);
    jsonParams.set(text, found);
  }
  return found;
}

function bind(text: string, params: unknown[] | undefined): never[] {
  const values = params ?? [];
  const json = jsonIndexes(text);
  if (json.length === 0) return values as never[];
  const bound = values.slice();
  for (const i of json) {
    const value = bound[i];
    if (typeof value === 'string') bound[i] = { toJSON: () => JSON.parse(value) as unknown };
  }
  return bound as never[];
}

/**
 * True when `sql` sends a jsonb parameter as given rather than through `JSON.stringify` (a
 * client Drizzle's postgres-js driver was made on): idem's JSON text then goes as it is.
 */
export function sendsJsonAsText(sql: PostgresJsLike<PostgresJsQueryable>): boolean {
  const serialize = sql.options?.serializers?.['3802'];
  return typeof serialize === 'function' && serialize('{}') === '{}';
}

/**
 * One of idem's statements as a prepared statement on `sql` (the client, or the `sql` of
 * `begin`); `jsonAsText`: see {@link sendsJsonAsText}.
 */
async function run(sql: PostgresJsQueryable, text: string, params: unknown[] | undefined, jsonAsText: boolean): Promise<QueryResultLike> {
  const rows = await sql.unsafe(text, jsonAsText ? ((params ?? []) as never[]) : bind(text, params), { prepare: true });
  return { rows: rows as unknown as Array<Record<string, unknown>>, rowCount: rows.count };
}

/**
 * idem's statements on `sql`, the client or the `sql` inside `begin`, as {@link postgresjs}
 * runs them: for a driver that reaches postgres.js through another library (idem/drizzle).
 */
export function postgresjsQueryable(sql: PostgresJsQueryable, jsonAsText: boolean, lost?: () => boolean): Queryable {
  return {
    query: (text, params) =>
      // Not even sent once the transaction's connection is lost: postgres.js would write it to
      // the closed socket (see withoutLateRollback, protocol.md H24).
      lost?.() ? Promise.reject(new Error('idem/postgresjs: the connection of this transaction was lost')) : run(sql, text, params, jsonAsText),
  };
}

/** postgres.js's codes for a statement whose connection closed, or was ended, under it. */
const LOST_CONNECTION = new Set(['CONNECTION_CLOSED', 'CONNECTION_DESTROYED', 'CONNECTION_ENDED']);

/**
 * How long a body failed by a socket error (a Node system error, with `syscall`) waits for
 * `begin` to reject before the error is taken for the application's own. postgres.js fails a
 * connection's statements with the socket's error and closes it in the same turn of the event
 * loop, so `begin` rejects within milliseconds when the transaction's connection died; a phase's
 * own I/O error (a file, an HTTP call: `ENOENT`, `ECONNRESET` of a fetch) leaves the connection
 * open, and the body must then fail as usual, or the connection would stay reserved for good.
 * One second is slack for a loaded host, paid only by a body that failed with a system error.
 */
const SOCKET_CLOSE_GRACE_MS = 1_000;

/** The first of `error` and the errors it wraps (`cause`) that matches `test`. */
function inChain(error: unknown, test: (e: { code?: unknown; syscall?: unknown }) => boolean): boolean {
  for (let e = error as { code?: unknown; syscall?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 5; depth++) {
    if (test(e)) return true;
    e = e.cause as typeof e;
  }
  return false;
}

/** postgres.js says the statement's connection is gone (the error or one it wraps). */
const lostConnection = (error: unknown) => inChain(error, (e) => typeof e.code === 'string' && LOST_CONNECTION.has(e.code));
/** A Node system error (the socket's, or any other I/O of the body's). */
const systemError = (error: unknown) => inChain(error, (e) => typeof e.code === 'string' && typeof e.syscall === 'string');

/**
 * `begin(body)` (postgres.js's `sql.begin`, or Drizzle's transaction on postgres.js), with a
 * body that never ends once the transaction's connection is lost; `body` gets `lost()`, true
 * from then on, so that idem sends none of its statements on that connection either. When its body ends,
 * `sql.begin` sends ROLLBACK (or COMMIT) on the transaction's connection without checking that
 * it is still open; postgres.js 3.4.9 then writes to the closed socket from a `setImmediate`,
 * a TypeError no caller can catch, and the process exits (porsager/postgres#1154). `sql.begin`
 * itself rejects when the connection closes, so a body failed by the lost connection (or one
 * still running when `begin` rejected) is left pending instead, and nothing is sent on the
 * closed connection: the request gets its 503 from `begin`'s rejection (protocol.md H24).
 */
export function withoutLateRollback<Tx, T>(begin: (body: (tx: Tx) => Promise<T>) => Promise<T>, body: (tx: Tx, lost: () => boolean) => Promise<T>): Promise<T> {
  let lost = false;
  let markLost!: () => void;
  const closed = new Promise<void>((resolve) => (markLost = resolve));
  const hold = () => new Promise<never>(() => undefined);
  /** True when `begin` rejects (the connection closed) within the grace, false after it. */
  const closesSoon = async (): Promise<boolean> => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<boolean>((resolve) => (timer = setTimeout(resolve, SOCKET_CLOSE_GRACE_MS, false)));
    try {
      return await Promise.race([closed.then(() => true), late]);
    } finally {
      clearTimeout(timer);
    }
  };
  const run = begin(async (tx) => {
    let value: T;
    try {
      value = await body(tx, () => lost);
    } catch (error) {
      if (lost || lostConnection(error)) return hold();
      if (systemError(error) && (await closesSoon())) return hold();
      throw error;
    }
    return lost ? hold() : value;
  });
  // While the body runs, `begin` rejects only when its connection closed.
  run.catch(() => {
    lost = true;
    markLost();
  });
  return run;
}

/**
 * The driver of a postgres.js client for `PostgresStore`: idem's statements run through
 * `sql.unsafe(text, params, { prepare: true })` (a named prepared statement per connection,
 * parsed once; concurrent statements on a connection are pipelined by postgres.js), and a
 * phase's transaction is `sql.begin`, whose `sql` the phase receives as `tx`.
 *
 * The client must parse values as postgres.js does by default (bytea as Buffer, json as
 * values, timestamptz as Date, int8 as string, or as BigInt with `types: { bigint }`; src/postgres/values.ts).
 * `storeTimeoutMs` answers a silent database's request at the deadline but cannot end
 * postgres.js's connection: give the client its own limit too, e.g.
 * `postgres(url, { connection: { statement_timeout: 10_000 } })`. Wait mode (`notify: true`)
 * uses `sql.listen`, on postgres.js's own listening connection.
 *
 * @param sql the client, `postgres(url, options)`
 * @throws {InvalidOptionError} when `sql` is not a postgres.js client, or has a `transform`
 *   (e.g. `postgres.camel`): it would rename idem's columns; use a client without one; or has
 *   no `connect_timeout` (`0`): a connection opened into a silent server would wait forever and
 *   the client never recover (protocol.md H24, docs/connection-faults.md)
 */
export function postgresjs<Tx extends PostgresJsQueryable>(sql: PostgresJsLike<Tx>): SqlDriver<Tx> {
  if (!sql || typeof sql.unsafe !== 'function' || typeof sql.begin !== 'function') {
    throw new InvalidOptionError('idem/postgresjs: pass a postgres.js client, postgres(url)');
  }
  const transform = sql.options?.transform;
  if (transform?.column?.from || transform?.value?.from || transform?.row?.from) {
    throw new InvalidOptionError(
      "idem/postgresjs: the client has a `transform` (e.g. postgres.camel), which renames idem's columns; pass a postgres.js client without one",
    );
  }
  // postgres.js's connect timer is off at 0: a connection opened while the server is silent
  // waits forever, the statements queued on it with it, and the client does not recover once
  // the server answers again (protocol.md H24). Its default (30 s) recovers.
  if (sql.options && 'connect_timeout' in sql.options && !sql.options.connect_timeout) {
    throw new InvalidOptionError(
      'idem/postgresjs: the client has no connect_timeout (0): a connection opened while the database is silent would wait forever; leave the default (30) or set a few seconds',
    );
  }
  const listen = sql.listen;
  // Asked per statement and per transaction, not once here: Drizzle's postgres-js driver
  // changes the client's serializers when it is made on the same client later.
  return {
    kind: SQL_DRIVER,
    name: 'postgres.js',
    query: (text, params) => run(sql, text, params, sendsJsonAsText(sql)),
    async transaction<T>(fn: (tx: Tx, q: Queryable) => Promise<T>): Promise<T> {
      const jsonAsText = sendsJsonAsText(sql);
      return withoutLateRollback<Tx, T>(
        (body) => sql.begin(body) as Promise<T>,
        (tx, lost) => fn(tx, postgresjsQueryable(tx, jsonAsText, lost)),
      );
    },
    ...(listen && {
      async listen(channel: string, onPayload: (payload: string | null) => void) {
        let listening = false;
        // postgres.js listens again by itself after its listening connection was lost and then
        // calls `onlisten` once more: a notification may have been missed meanwhile (null).
        const { unlisten } = await listen.call(sql, channel, onPayload, () => {
          if (listening) onPayload(null);
          listening = true;
        });
        return unlisten;
      },
    }),
  };
}
