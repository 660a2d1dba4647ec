/**
 * The example payments API on MySQL or MariaDB (`DATABASE_URL=mysql://…`): idem's keys in
 * `MySqlStore`, the charges and the fake PSP's table beside them, on one mysql2 pool.
 *
 * The example's handlers are written once against a small `query(text, params)` interface
 * (`Queryable`, `$1`-style placeholders, `{ rows }` back), so that the same code runs on
 * PostgreSQL, PGlite and MySQL; the statements that differ are in statements.ts. On MySQL the
 * store gets a client of its own kind (`MySqlDriver` of idem/mysql) whose transaction hands a
 * phase that interface over the transaction's own mysql2 connection: the charge row and idem's
 * fenced recovery point commit together. An app of your own would pass the pool itself,
 * `new MySqlStore({ client: pool })`, and write with mysql2's `tx.query` (examples/mysql).
 */
import { MYSQL_DRIVER, type MySqlDriver } from 'idem/mysql';
import type { Queryable } from 'idem/postgres';
import type { Pool, PoolConnection } from 'mysql2/promise';

/** The example's database on MySQL: `Queryable` on the pool, and the store's client. */
export interface MySqlDatabase extends Queryable {
  readonly dialect: 'mysql';
  /** `MySqlStore`'s client: a phase's `tx` is a `Queryable` on the transaction's connection. */
  readonly driver: MySqlDriver<Queryable>;
  readonly pool: Pool;
}

/** Whether `db` is the example's MySQL database. */
export function isMySql(db: unknown): db is MySqlDatabase {
  return typeof db === 'object' && db !== null && (db as { dialect?: unknown }).dialect === 'mysql';
}

/**
 * `text` with `$n` placeholders as mysql2 takes it: `?` in order, the values picked (and
 * repeated) by number.
 */
function positional(text: string, params: unknown[] = []): { sql: string; values: unknown[] } {
  const values: unknown[] = [];
  const sql = text.replace(/\$(\d+)/g, (_, n: string) => {
    values.push(params[Number(n) - 1]);
    return '?';
  });
  return { sql, values };
}

/** `Queryable` over a mysql2 pool or connection: the rows of a SELECT, or `[header]` of a write. */
function queryable(target: Pick<Pool, 'query'>): Queryable['query'] {
  return async (text, params) => {
    const { sql, values } = positional(text, params);
    const [result] = await target.query(sql, values);
    return { rows: (Array.isArray(result) ? result : [result]) as Array<Record<string, unknown>> };
  };
}

/** Wraps a mysql2 promise pool (`mysql.createPool` of `mysql2/promise`). */
export function mysqlDatabase(pool: Pool): MySqlDatabase {
  const ignore = () => undefined;
  const driver: MySqlDriver<Queryable> = {
    [MYSQL_DRIVER]: true,
    name: 'payments example (mysql2)',
    pool,
    async transaction(fn) {
      const conn: PoolConnection = await pool.getConnection();
      // A socket cut while this connection is checked out must not end the process (it fails
      // the statement in flight; the pool's own listener is a `once`).
      conn.connection.on('error', ignore);
      const tx: Queryable = { query: queryable(conn) };
      try {
        await conn.query('START TRANSACTION');
        const value = await fn(tx, conn);
        await conn.query('COMMIT');
        conn.release();
        return value;
      } catch (error) {
        // Rolled back and reused, or destroyed when even the rollback failed (a lost socket).
        await conn.query('ROLLBACK').then(
          () => conn.release(),
          () => conn.destroy(),
        );
        throw error;
      }
    },
  };
  return { dialect: 'mysql', driver, pool, query: queryable(pool) };
}

/**
 * The example's tables on MySQL, under a named lock so that workers starting at once do not
 * race. `created_at` is a TIMESTAMP (stored in UTC, read back as epoch seconds).
 */
export async function migrateMySqlExample(pool: Pool): Promise<void> {
  const conn = await pool.getConnection();
  try {
    await conn.query(`SELECT GET_LOCK('idem:example:payments:migrate', 60)`);
    try {
      await conn.query(`CREATE TABLE IF NOT EXISTS charges (
        id              VARCHAR(64)   NOT NULL PRIMARY KEY,
        tenant          VARCHAR(255)  NOT NULL,
        idempotency_key VARCHAR(255)  NOT NULL,
        amount          BIGINT        NOT NULL CHECK (amount > 0),
        currency        VARCHAR(16)   NOT NULL,
        customer        VARCHAR(255)  NOT NULL,
        metadata        LONGTEXT      NOT NULL DEFAULT ('{}'),
        status          VARCHAR(32)   NOT NULL DEFAULT 'pending',
        psp_charge_id   VARCHAR(64),
        created_at      TIMESTAMP(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
        KEY charges_customer (customer)
      )`);
      await conn.query(`CREATE TABLE IF NOT EXISTS psp_charges (
        id              VARCHAR(64)   NOT NULL PRIMARY KEY,
        idempotency_key VARCHAR(255)  NOT NULL UNIQUE,
        amount          BIGINT        NOT NULL,
        currency        VARCHAR(16)   NOT NULL,
        customer        VARCHAR(255)  NOT NULL,
        created_at      TIMESTAMP(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
        KEY psp_charges_customer (customer)
      )`);
    } finally {
      await conn.query(`SELECT RELEASE_LOCK('idem:example:payments:migrate')`);
    }
  } finally {
    conn.release();
  }
}
