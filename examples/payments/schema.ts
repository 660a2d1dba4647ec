import { type SqlClient, toExecutor } from 'idem/postgres';

/**
 * The example's own tables. `charges` is the merchant's ledger (written in atomic phases);
 * `psp_charges` belongs to the fake payment provider, which would be another company's
 * database in real life. Both migrations can run any number of times, also from several
 * processes starting at once on a fresh database: concurrent `CREATE TABLE IF NOT EXISTS`
 * can fail with a unique violation in pg_type, so they run under an advisory lock.
 */
export async function migrateExample(db: SqlClient, options: { colocateWith?: string } = {}): Promise<void> {
  // On Citus `charges` is distributed by tenant, co-located with idem's table (the scope is the
  // tenant), so its primary key must hold the tenant.
  const chargesKey = options.colocateWith ? 'PRIMARY KEY (tenant, id)' : 'PRIMARY KEY (id)';
  await toExecutor(db).transaction(async (tx) => {
    await tx.query(`SELECT pg_advisory_xact_lock(hashtext('idem:example:payments:migrate'))`);
    await tx.query(`CREATE TABLE IF NOT EXISTS charges (
      id             text        NOT NULL,
      tenant         text        NOT NULL,
      idempotency_key text       NOT NULL,
      amount         bigint      NOT NULL CHECK (amount > 0),
      currency       text        NOT NULL,
      customer       text        NOT NULL,
      metadata       jsonb       NOT NULL DEFAULT '{}'::jsonb,
      status         text        NOT NULL DEFAULT 'pending',
      psp_charge_id  text,
      created_at     timestamptz NOT NULL DEFAULT now(),
      ${chargesKey}
    )`);
    await tx.query(`CREATE TABLE IF NOT EXISTS psp_charges (
      id              text        PRIMARY KEY,
      idempotency_key text        NOT NULL UNIQUE,
      amount          bigint      NOT NULL,
      currency        text        NOT NULL,
      customer        text        NOT NULL,
      created_at      timestamptz NOT NULL DEFAULT now()
    )`);
    // psp_charges stays a table on the coordinator: the provider's own database in real life.
    if (options.colocateWith) {
      const done = await tx.query(`SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'charges'::regclass`);
      if (done.rows.length === 0) await tx.query(`SELECT create_distributed_table('charges', 'tenant', colocate_with => $1)`, [options.colocateWith]);
    }
  });
}
