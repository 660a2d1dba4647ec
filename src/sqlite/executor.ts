/**
 * idem's statements on one SQLite client, one at a time per client (protocol.md K51).
 *
 * SQLite has one writer per file and a connection is one session: while a phase's transaction
 * is open on the user's connection (its effects awaited in between), any other statement sent on
 * that connection would run inside it, see its uncommitted rows and commit or roll back with it.
 * So every statement and transaction of idem on a client waits its turn in one queue per client
 * (shared by every store on it). Across processes, SQLite's own file lock decides: a write
 * transaction starts with `BEGIN IMMEDIATE` (the write lock at once, never a deferred upgrade that
 * fails with SQLITE_BUSY mid-transaction) and waits up to the connection's busy timeout for it.
 */
import { StoreTimeoutError } from '../store/deadline.js';
import {
  isLibsqlClient,
  type LibsqlClientLike,
  type LibsqlExecutorLike,
  type LibsqlValue,
  type SqliteClient,
  type SqliteDatabaseLike,
  type SqliteRow,
} from './client.js';

/** Runs one statement and returns its rows (a write returns its `RETURNING` rows). */
export type SqliteRun = (sql: string, params?: unknown[]) => Promise<SqliteRow[]>;

/** The turn of each client: the last operation queued on it. */
const queues = new WeakMap<object, Promise<unknown>>();

/** `fn` after every operation already queued on `client`, before any queued after it. */
function serial<T>(client: object, fn: () => Promise<T>): Promise<T> {
  const before = queues.get(client) ?? Promise.resolve();
  const run = before.then(fn, fn);
  queues.set(
    client,
    run.catch(() => undefined),
  );
  return run;
}

/** SQLITE_BUSY (5) and SQLITE_LOCKED (6) as each driver reports them. */
function isBusy(error: unknown): boolean {
  const e = error as { code?: unknown; errcode?: unknown; message?: unknown } | null;
  if (e === null || typeof e !== 'object') return false;
  if (e.errcode === 5 || e.errcode === 6) return true;
  if (typeof e.code === 'string' && /^SQLITE_(BUSY|LOCKED)/.test(e.code)) return true;
  return typeof e.message === 'string' && /database (table )?is locked/.test(e.message);
}

/** A busy file is the store being unavailable for now (503 with Retry-After); anything else goes on. */
function busyAsTimeout(error: unknown): never {
  if (isBusy(error)) {
    const timeout = new StoreTimeoutError('idem/sqlite: the database file stayed locked by another writer past the busy timeout');
    (timeout as { cause?: unknown }).cause = error;
    throw timeout;
  }
  throw error;
}

/** Rows of a synchronous database, prepared statements cached by their text. */
class SyncRunner {
  private readonly cache = new Map<string, ReturnType<SqliteDatabaseLike['prepare']>>();
  constructor(readonly db: SqliteDatabaseLike) {}

  all(sql: string, params: unknown[]): SqliteRow[] {
    let statement = this.cache.get(sql);
    if (!statement) {
      statement = this.db.prepare(sql);
      this.cache.set(sql, statement);
    }
    if (statement.reader === false) {
      statement.run(...params.map(bind));
      return [];
    }
    return statement.all(...params.map(bind)) as SqliteRow[];
  }
}

/** Values as every driver binds them: booleans as 0/1, undefined as NULL, bytes as a Buffer (better-sqlite3). */
function bind(value: unknown): unknown {
  if (value === undefined) return null;
  if (typeof value === 'boolean') return value ? 1 : 0;
  if (value instanceof Uint8Array && !Buffer.isBuffer(value)) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  return value;
}

async function libsqlRows(on: LibsqlExecutorLike, sql: string, params: unknown[]): Promise<SqliteRow[]> {
  const result = await on.execute({ sql, args: params.map(bind) as LibsqlValue[] });
  return Array.from(result.rows) as SqliteRow[];
}

/**
 * idem's statements on `client`, in its turn; see the module comment.
 * @typeParam Tx what a transaction hands its body: the database, or libSQL's `Transaction`
 */
export class SqliteExecutor<Tx> {
  private readonly sync: SyncRunner | undefined;
  private readonly libsql: LibsqlClientLike | undefined;

  constructor(readonly client: SqliteClient) {
    if (isLibsqlClient(client)) this.libsql = client;
    else this.sync = new SyncRunner(client);
  }

  /** One statement on its own (autocommit), in the client's turn. */
  rows(sql: string, params: unknown[] = []): Promise<SqliteRow[]> {
    return serial(this.client, async () => {
      try {
        return this.sync ? this.sync.all(sql, params) : await libsqlRows(this.libsql!, sql, params);
      } catch (error) {
        return busyAsTimeout(error);
      }
    });
  }

  /** Statements that return no rows (DDL, PRAGMA settings), in the client's turn; synchronous clients only run them as one script. */
  script(statements: string[]): Promise<void> {
    return serial(this.client, async () => {
      try {
        if (this.sync) this.sync.db.exec(statements.join(';\n'));
        else for (const sql of statements) await this.libsql!.execute({ sql, args: [] });
      } catch (error) {
        busyAsTimeout(error);
      }
    });
  }

  /**
   * `fn` in a write transaction (`BEGIN IMMEDIATE`) in the client's turn: committed when it
   * resolves, rolled back when it throws (the error goes on). `fn` gets the statement runner of
   * the transaction and the user's `tx` (the database, or libSQL's `Transaction`).
   */
  transaction<T>(fn: (run: SqliteRun, tx: Tx) => Promise<T>): Promise<T> {
    return serial(this.client, () => (this.sync ? this.syncTransaction(this.sync, fn) : this.libsqlTransaction(this.libsql!, fn)));
  }

  private async syncTransaction<T>(sync: SyncRunner, fn: (run: SqliteRun, tx: Tx) => Promise<T>): Promise<T> {
    try {
      sync.db.exec('BEGIN IMMEDIATE');
    } catch (error) {
      busyAsTimeout(error);
    }
    try {
      const value = await fn(async (sql, params = []) => sync.all(sql, params), sync.db as Tx);
      sync.db.exec('COMMIT');
      return value;
    } catch (error) {
      try {
        sync.db.exec('ROLLBACK');
      } catch {
        // no transaction left to roll back (SQLite rolled it back itself on a fatal error)
      }
      return busyAsTimeout(error);
    }
  }

  private async libsqlTransaction<T>(client: LibsqlClientLike, fn: (run: SqliteRun, tx: Tx) => Promise<T>): Promise<T> {
    let tx: Awaited<ReturnType<LibsqlClientLike['transaction']>>;
    try {
      tx = await client.transaction('write');
    } catch (error) {
      return busyAsTimeout(error);
    }
    try {
      const value = await fn((sql, params = []) => libsqlRows(tx, sql, params), tx as Tx);
      await tx.commit();
      return value;
    } catch (error) {
      await tx.rollback().catch(() => undefined);
      return busyAsTimeout(error);
    } finally {
      tx.close();
    }
  }
}
