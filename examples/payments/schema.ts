import { type SqlClient, toExecutor } from 'idem/postgres';

/**
 * The example's own tables. `charges` is the merchant's ledger (written in atomic phases);
 * `psp_charges` belongs to the fake payment provider, which would be another company's
 * database in real life. Both migrations can run any number of times, also from several
 * processes starting at once on a fresh database: concurrent `CREATE TABLE IF NOT EXISTS`
 * can fail with a unique violation in pg_type, so they run under an advisory lock.
 */
export async function migrateExample(db: SqlClient): Promise<void> {
  await toExecutor(db).transaction(async (tx) => {
    await tx.query(`SELECT pg_advisory_xact_lock(hashtext('idem:example:payments:migrate'))`);
    await tx.query(`CREATE TABLE IF NOT EXISTS charges (
      id             text        PRIMARY KEY,
      tenant         text        NOT NULL,
      idempotency_key text       NOT NULL,
      amount         bigint      NOT NULL CHECK (amount > 0),
      currency       text        NOT NULL,
      customer       text        NOT NULL,
      metadata       jsonb       NOT NULL DEFAULT '{}'::jsonb,
      status         text        NOT NULL DEFAULT 'pending',
      psp_charge_id  text,
      created_at     timestamptz NOT NULL DEFAULT now()
    )`);
    await tx.query(`CREATE TABLE IF NOT EXISTS psp_charges (
      id              text        PRIMARY KEY,
      idempotency_key text        NOT NULL UNIQUE,
      amount          bigint      NOT NULL,
      currency        text        NOT NULL,
      customer        text        NOT NULL,
      created_at      timestamptz NOT NULL DEFAULT now()
    )`);
  });
}
