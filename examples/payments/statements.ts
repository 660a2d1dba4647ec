/**
 * The example's own statements where PostgreSQL (and PGlite) and MySQL (and MariaDB) differ.
 * Placeholders are `$n` in both: on MySQL the example's `Queryable` turns them into `?`
 * (mysql.ts). Values are the same, in the same order, for both dialects.
 */

/** Which SQL the example speaks. */
export type Dialect = 'postgres' | 'mysql';

export interface PaymentsStatements {
  /** Values: id, tenant, key, amount, currency, customer, metadata JSON. On PostgreSQL it returns `created_at`. */
  insertCharge: string;
  /** MySQL (no RETURNING): the new charge's `created`, epoch seconds. Values: id, tenant. */
  chargeCreated?: string;
  /** A charge as `GET /v1/charges/:id` shows it. Values: id, tenant. */
  findCharge: string;
  /** The PSP's insert that keeps the first charge of a key. Values: id, key, amount, currency, customer. */
  pspInsert: string;
  /** The PSP's charge of a key. Values: key. */
  pspByKey: string;
  /** Every PSP charge, oldest first. */
  pspList: string;
}

const PSP_COLUMNS = {
  postgres: `id, idempotency_key, amount::float8 AS amount, currency, customer,
  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at`,
  // TIMESTAMP is UTC inside; shown in UTC whatever the session's time_zone.
  mysql: `id, idempotency_key, CAST(amount AS DOUBLE) AS amount, currency, customer,
  CONCAT(LEFT(DATE_FORMAT(CONVERT_TZ(created_at, @@session.time_zone, '+00:00'), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z') AS created_at`,
};

export const STATEMENTS: Record<Dialect, PaymentsStatements> = {
  postgres: {
    insertCharge: `INSERT INTO charges (id, tenant, idempotency_key, amount, currency, customer, metadata)
      VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb) RETURNING created_at`,
    findCharge: `SELECT id, amount::float8 AS amount, currency, customer, status, psp_charge_id, metadata,
      floor(extract(epoch FROM created_at))::float8 AS created
      FROM charges WHERE id = $1 AND tenant = $2`,
    pspInsert: `INSERT INTO psp_charges (id, idempotency_key, amount, currency, customer)
      VALUES ($1, $2, $3, $4, $5) ON CONFLICT (idempotency_key) DO NOTHING`,
    pspByKey: `SELECT ${PSP_COLUMNS.postgres} FROM psp_charges WHERE idempotency_key = $1`,
    pspList: `SELECT ${PSP_COLUMNS.postgres} FROM psp_charges ORDER BY created_at, id`,
  },
  mysql: {
    insertCharge: `INSERT INTO charges (id, tenant, idempotency_key, amount, currency, customer, metadata)
      VALUES ($1, $2, $3, $4, $5, $6, $7)`,
    chargeCreated: `SELECT FLOOR(UNIX_TIMESTAMP(created_at)) AS created FROM charges WHERE id = $1 AND tenant = $2`,
    findCharge: `SELECT id, CAST(amount AS DOUBLE) AS amount, currency, customer, status, psp_charge_id, metadata,
      FLOOR(UNIX_TIMESTAMP(created_at)) AS created
      FROM charges WHERE id = $1 AND tenant = $2`,
    // INSERT IGNORE would also swallow other errors (a too-long value); this keeps the first row of a key only.
    pspInsert: `INSERT INTO psp_charges (id, idempotency_key, amount, currency, customer)
      VALUES ($1, $2, $3, $4, $5) ON DUPLICATE KEY UPDATE id = id`,
    pspByKey: `SELECT ${PSP_COLUMNS.mysql} FROM psp_charges WHERE idempotency_key = $1`,
    pspList: `SELECT ${PSP_COLUMNS.mysql} FROM psp_charges ORDER BY created_at, id`,
  },
};
