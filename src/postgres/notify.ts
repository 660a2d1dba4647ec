/**
 * Wait mode on PostgreSQL (protocol.md K17): `LISTEN/NOTIFY` wakes the duplicates waiting for a
 * key. The finish, release, discard and takeover statements send `pg_notify` themselves, in
 * the transaction that changes the row, so the notification is delivered exactly when the
 * change commits (and never for a rolled-back one). One listening connection per process and
 * pool (PGlite or a client driver: its own `listen`), shared by every waiter of every store on that client; no
 * waiter polls.
 */
import { createHash } from 'node:crypto';
import { type ChangeFeed, KeyChangeHub, keyId } from '../store/key-changes.js';
import type { StoreContext } from './context.js';
import { isSqlDriver, type PoolClientLike, type PoolLike, type SqlClient, type SqlDriver } from './client.js';
import type { Statements } from './sql.js';
import { literal } from './sql/table.js';

/** Called with a notification's payload, or `null` when the listening connection was lost. */
type OnPayload = (payload: string | null) => void;
type Unlisten = () => Promise<void>;

/** Where notifications come from: a shared pg connection, or PGlite's `listen`. */
interface NotificationSource {
  listen(channel: string, onPayload: OnPayload): Promise<Unlisten>;
}

/** The slice of PGlite used here. */
interface PGliteListen {
  listen(channel: string, callback: (payload: string) => void): Promise<() => Promise<void>>;
}

/** The slice of a pg `PoolClient` used for LISTEN. */
interface ListeningClient extends PoolClientLike {
  on(event: 'notification', fn: (message: { channel: string; payload?: string }) => void): unknown;
  on(event: 'error', fn: (error: Error) => void): unknown;
  removeAllListeners?(event: string): unknown;
}

/**
 * The notification channel of `table`: `idem_<table>` in lower case with the schema's dot as
 * `_` (a plain identifier: PGlite's `listen` does not quote it), or a hash of the table when
 * that is too long. Two tables whose names differ only in case share a channel; their waiters
 * then only wake for nothing and read again.
 */
export function channelName(table: string): string {
  const name = `idem_${table.toLowerCase().replace('.', '_')}`;
  return name.length <= 63 ? name : `idem_${createHash('sha256').update(table).digest('hex').slice(0, 40)}`;
}

/**
 * The four statements that change what a waiter decides (takeover, finish, release, discard),
 * each wrapped so that the row it changed also sends `pg_notify(channel, payload)` in the same
 * statement, hence the same transaction. Every one of them takes $1 scope and $2 key. A fenced
 * write that matched no row sends nothing.
 */
export function notifyingStatements(sql: Statements, channel: string): Statements {
  const wrap = (statement: string) =>
    `WITH w AS (${statement})
      SELECT w.*, pg_notify(${literal(channel)}, char_length($1::text)::text || ':' || $1::text || $2::text) IS NULL AS notified FROM w`;
  return {
    ...sql,
    takeOver: wrap(sql.takeOver),
    finish: wrap(sql.finish),
    release: wrap(sql.release),
    discard: wrap(sql.discard),
    operatorRelease: wrap(sql.operatorRelease),
    operatorForget: wrap(sql.operatorForget),
  };
}

/**
 * `notify: 'after-commit'` (and Citus): the notification of a change that committed, as a
 * statement of its own on the store's client (on Citus, the coordinator, where the waiters
 * listen). A failure is dropped: the change stands, and its waiters read at their deadline.
 */
export async function notifyAfterCommit(ctx: StoreContext<unknown>, scope: string, key: string): Promise<void> {
  await ctx.db.query('SELECT pg_notify($1, $2) IS NULL AS notified', [ctx.channel, keyId(scope, key)]).catch(() => undefined);
}

/** One LISTEN connection per pool, checked out while some channel has a listener and returned after. */
class PoolListener implements NotificationSource {
  private conn: ListeningClient | undefined;
  private readonly channels = new Map<string, Set<OnPayload>>();
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly pool: PoolLike) {}

  listen(channel: string, onPayload: OnPayload): Promise<Unlisten> {
    return this.serially(async () => {
      const conn = await this.connection();
      let listeners = this.channels.get(channel);
      if (!listeners) {
        listeners = new Set();
        this.channels.set(channel, listeners);
        try {
          await conn.query(`LISTEN ${quoteIdent(channel)}`);
        } catch (error) {
          this.channels.delete(channel);
          this.dropIfIdle();
          throw error;
        }
      }
      listeners.add(onPayload);
      return () => this.serially(() => this.unlisten(conn, channel, onPayload));
    });
  }

  private async unlisten(conn: ListeningClient, channel: string, onPayload: OnPayload): Promise<void> {
    const listeners = this.channels.get(channel);
    if (conn !== this.conn || !listeners?.delete(onPayload) || listeners.size > 0) return;
    this.channels.delete(channel);
    try {
      await conn.query(`UNLISTEN ${quoteIdent(channel)}`);
    } catch {
      // The connection broke; `lost` already handled it.
    }
    this.dropIfIdle();
  }

  private async connection(): Promise<ListeningClient> {
    if (this.conn) return this.conn;
    const conn = (await this.pool.connect()) as ListeningClient;
    conn.on('notification', (message) => {
      if (conn !== this.conn) return;
      for (const fn of this.channels.get(message.channel) ?? []) fn(message.payload ?? '');
    });
    conn.on('error', () => this.lost(conn));
    this.conn = conn;
    return conn;
  }

  /** The connection broke: every listener hears `null` (its waiters read again) and must listen anew. */
  private lost(conn: ListeningClient): void {
    if (conn !== this.conn) return;
    this.conn = undefined;
    const all = [...this.channels.values()].flatMap((set) => [...set]);
    this.channels.clear();
    conn.release(new Error('idem: LISTEN connection lost'));
    for (const fn of all) fn(null);
  }

  private dropIfIdle(): void {
    if (this.channels.size > 0 || !this.conn) return;
    const conn = this.conn;
    this.conn = undefined;
    conn.removeAllListeners?.('notification');
    conn.release();
  }

  private serially<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }
}

const poolListeners = new WeakMap<object, PoolListener>();

/**
 * The notification source of `client`: a driver's or PGlite's own `listen`, or the pool's one
 * shared listener (also for a driver over a pool or PGlite, e.g. idem/drizzle).
 */
export function sourceOf(client: SqlClient | SqlDriver<unknown>): NotificationSource {
  if (isSqlDriver(client)) {
    const listen = client.listen;
    if (!listen) throw new TypeError(`idem/postgres: the ${client.name} driver cannot LISTEN`); // the options reject notify first
    return { listen: (channel, onPayload) => listen.call(client, channel, onPayload) };
  }
  if (typeof (client as unknown as PGliteListen).listen === 'function' && typeof (client as { transaction?: unknown }).transaction === 'function') {
    const db = client as unknown as PGliteListen;
    return { listen: (channel, onPayload) => db.listen(channel, onPayload) };
  }
  let listener = poolListeners.get(client);
  if (!listener) {
    listener = new PoolListener(client as PoolLike);
    poolListeners.set(client, listener);
  }
  return listener;
}

/**
 * The change feed of one store (protocol.md K17): one registration on the table's channel while
 * any key is watched. A lost listening connection wakes every waiter, listens anew at once, and
 * wakes them again once it listens (a change between the loss and then reaches them by that read).
 */
export class TableFeed implements ChangeFeed {
  private readonly source: NotificationSource;
  private registration: Promise<Unlisten> | undefined;
  private watched = 0;
  /** The key subscriptions, fed by this feed. */
  readonly hub: KeyChangeHub;

  constructor(
    client: SqlClient | SqlDriver<unknown>,
    private readonly channel: string,
    timeoutMs = 0,
  ) {
    this.source = sourceOf(client);
    this.hub = new KeyChangeHub(this, timeoutMs);
  }

  async watch(_id: string): Promise<void> {
    this.watched++;
    await this.register();
  }

  unwatch(_id: string): void {
    if (--this.watched > 0) return;
    const registration = this.registration;
    this.registration = undefined;
    registration?.then((unlisten) => unlisten()).catch(() => undefined);
  }

  private register(): Promise<Unlisten> {
    if (!this.registration) {
      const registration = this.source.listen(this.channel, (payload) => this.dispatch(payload));
      this.registration = registration;
      registration.catch(() => {
        if (this.registration === registration) this.registration = undefined;
      });
    }
    return this.registration;
  }

  private dispatch(payload: string | null): void {
    if (payload !== null) {
      this.hub.changed(payload);
      return;
    }
    this.registration = undefined;
    this.hub.lost();
    if (this.watched > 0)
      this.register().then(
        () => this.hub.lost(),
        () => undefined,
      );
  }
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}
