/**
 * `idem/drizzle`: `PostgresStore` on a Drizzle database, so a phase's `tx` is Drizzle's own
 * transaction (`tx.insert(charges)…`) and idem's fenced recovery-point write commits in the
 * same transaction (protocol.md K4, K5, Q4).
 *
 * Drizzle runs on a driver, and idem's statements go to that driver directly (not through
 * Drizzle's query builder): the pool or PGlite instance behind `db.$client` outside a
 * transaction, the connection of Drizzle's transaction inside one. So they get the same
 * prepared statements and the same value types as `PostgresStore` on that driver alone.
 * Supported: `drizzle-orm/node-postgres` (on a `pg.Pool`), `drizzle-orm/postgres-js` and
 * `drizzle-orm/pglite`. Drizzle is an optional peer dependency; nothing of it is imported here.
 */
import { InvalidOptionError } from '../core/errors.js';
import { type PoolLike, type Queryable, type QueryResultLike, SQL_DRIVER, type SqlClient, type SqlDriver, type SqlExecutor } from '../postgres/client.js';
import { toExecutor } from '../postgres/executor.js';
import { hearConnectionErrors } from '../postgres/connection-errors.js';
import { sourceOf } from '../postgres/notify.js';
import { type PostgresJsLike, type PostgresJsQueryable, postgresjs, postgresjsQueryable, sendsJsonAsText, withoutLateRollback } from '../postgresjs/index.js';

/**
 * The slice of a Drizzle PostgreSQL database idem uses: `transaction`, whose `tx` is what a
 * phase gets, and `$client`, the driver's client Drizzle was made with (every `drizzle(…)`
 * sets it; the `PgDatabase` type does not declare it).
 * @typeParam Tx Drizzle's transaction, `PgTransaction<…>` of the database's driver and schema
 */
export interface DrizzleDatabaseLike<Tx> {
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  readonly $client?: unknown;
}

/** Drizzle's transaction as far as idem reaches into it: the session holding the transaction's connection. */
interface TransactionInternals {
  _?: { session?: { client?: unknown } };
}

/** How idem's statements run on one of the drivers Drizzle sits on. */
interface Connection {
  /** `drizzle (node-postgres)`, … */
  name: string;
  /** A statement on its own (autocommit), on `db.$client`. */
  query(text: string, params?: unknown[]): Promise<QueryResultLike>;
  /**
   * idem's handle on the connection of a Drizzle transaction (`tx._.session.client`), and what
   * to undo when the transaction's body is done.
   */
  inTransaction(client: unknown, lost?: () => boolean): { sql: Queryable; done?(): void };
  /**
   * On postgres.js: Drizzle's transaction is `sql.begin`, run through `withoutLateRollback`,
   * whose `lost` reaches `inTransaction` (protocol.md H24).
   */
  postgresJs?: true;
  /** LISTEN on the driver, when it can. */
  listen?: SqlDriver<unknown>['listen'];
}

/**
 * A driver for `PostgresStore` over a Drizzle database on node-postgres (a `pg.Pool`),
 * postgres.js or PGlite. In `phase` and `respond`, `tx` is Drizzle's transaction, typed from
 * `db` (its schema included).
 *
 * @example
 * ```ts
 * import { drizzle } from 'drizzle-orm/node-postgres';
 * import { drizzle as idemDrizzle } from 'idem/drizzle';
 * const db = drizzle(new pg.Pool({ connectionString }));
 * const store = new PostgresStore({ client: idemDrizzle(db) });
 * // idem.phase('charge_created', (tx) => tx.insert(charges).values({ … }))
 * ```
 * @throws {TypeError} when `db` is not a Drizzle database on one of those drivers (a single
 *   `pg.Client` cannot run concurrent transactions: make the database on a `pg.Pool`)
 * @throws {InvalidOptionError} for a postgres.js client with a `transform` (see `postgresjs`);
 *   at a phase, when Drizzle's transaction does not hold its connection where idem looks
 */
export function drizzle<Tx>(db: DrizzleDatabaseLike<Tx>): SqlDriver<Tx> {
  if (!db || typeof db.transaction !== 'function' || !db.$client) {
    throw new TypeError('idem/drizzle: pass a Drizzle database (drizzle(...) from drizzle-orm/node-postgres, postgres-js or pglite)');
  }
  const conn = connectionOf(db.$client);
  const driver: SqlDriver<Tx> = {
    kind: SQL_DRIVER,
    name: conn.name,
    query: (text, params) => conn.query(text, params),
    transaction<T>(fn: (tx: Tx, sql: Queryable) => Promise<T>) {
      const body = async (tx: Tx, lost?: () => boolean) => {
        const { sql, done } = conn.inTransaction(sessionClient(tx), lost);
        try {
          return await fn(tx, sql);
        } finally {
          done?.();
        }
      };
      const begin = (b: (tx: Tx) => Promise<T>) => db.transaction(b);
      return conn.postgresJs ? withoutLateRollback(begin, body) : begin((tx) => body(tx));
    },
  };
  if (conn.listen) driver.listen = conn.listen;
  return driver;
}

/**
 * The connection of Drizzle's transaction `tx`, as every PostgreSQL driver of drizzle-orm
 * (0.3x–0.45) keeps it: `tx._.session.client`.
 * @throws {InvalidOptionError} when it is not there (a Drizzle version that keeps it elsewhere)
 */
function sessionClient(tx: unknown): unknown {
  const client = (tx as TransactionInternals)?._?.session?.client;
  if (!client)
    throw new InvalidOptionError(
      "idem/drizzle: cannot find the connection of Drizzle's transaction (tx._.session.client); is this drizzle-orm version supported?",
    );
  return client;
}

/**
 * idem's statements on the driver behind `client` (`db.$client`).
 * @throws {TypeError} for a driver idem does not know
 */
function connectionOf(client: unknown): Connection {
  const postgresJs = client as PostgresJsLike<PostgresJsQueryable> | undefined;
  if (typeof client === 'function' && typeof postgresJs?.begin === 'function') {
    // postgres.js: `sql`; inside Drizzle's transaction, the `sql` of `sql.begin`.
    const outside = postgresjs(postgresJs);
    const jsonAsText = sendsJsonAsText(postgresJs); // Drizzle made the json serializers the identity
    return {
      name: 'drizzle (postgres.js)',
      postgresJs: true,
      query: (text, params) => outside.query(text, params),
      inTransaction: (tx, lost) => ({ sql: postgresjsQueryable(tx as PostgresJsQueryable, jsonAsText, lost) }),
      ...(outside.listen && { listen: outside.listen }),
    };
  }
  if (!client || typeof (client as Queryable).query !== 'function') {
    throw new TypeError('idem/drizzle: the Drizzle database must be on node-postgres (a pg.Pool), postgres.js or PGlite');
  }
  if (typeof (client as { transaction?: unknown }).transaction === 'function') {
    // PGlite; inside Drizzle's transaction, PGlite's `Transaction`, a Queryable too.
    const pglite = client as Queryable;
    return {
      name: 'drizzle (pglite)',
      query: (text, params) => pglite.query(text, params),
      inTransaction: (tx) => ({ sql: tx as Queryable }),
      listen: (channel, onPayload) => sourceOf(client as SqlClient).listen(channel, onPayload),
    };
  }
  if (typeof (client as PoolLike).connect === 'function' && typeof (client as PoolLike).totalCount === 'number') {
    // node-postgres: named prepared statements on the pool and on the transaction's
    // PoolClient, as PostgresStore does on a pg.Pool (the deadline is the store's, around them).
    const pg: SqlExecutor = toExecutor(client as PoolLike);
    return {
      name: 'drizzle (node-postgres)',
      query: (text, params) => pg.query(text, params),
      inTransaction(tx) {
        // Drizzle holds one connection for a transaction only when it sees a pool (an
        // `instanceof Pool`, or a class named like one); on anything else it would run BEGIN,
        // the effects and COMMIT as separate pool queries, and idem's fenced write would land
        // outside the effects' transaction. Refuse that rather than commit unfenced.
        if (tx === client || typeof (tx as { release?: unknown }).release !== 'function') {
          throw new InvalidOptionError(
            'idem/drizzle: Drizzle did not check a connection out of the pool for this transaction; make the Drizzle database on a pg.Pool itself',
          );
        }
        // A connection that breaks emits 'error'; unheard, that would end the process (Drizzle
        // does not listen): the statement on it fails instead. Heard for good, not only during
        // the body, so Drizzle's COMMIT and its next BEGIN on this connection are covered too
        // (protocol.md H24).
        const conn = tx as Queryable;
        hearConnectionErrors(conn);
        return { sql: { query: (text, params) => pg.queryOn(conn, text, params) } };
      },
      listen: (channel, onPayload) => sourceOf(client as PoolLike).listen(channel, onPayload),
    };
  }
  throw new TypeError(
    'idem/drizzle: a Drizzle database on a single pg.Client cannot run concurrent transactions; make it on a pg.Pool (drizzle(new pg.Pool(...)))',
  );
}
