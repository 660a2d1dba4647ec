/**
 * postgres.js: `POST /v1/charges` on the web-standard core (`HttpIdempotency`), its charge row
 * inserted with postgres.js's own `TransactionSql` (the `sql` of `sql.begin`) in an atomic phase.
 * A retry with the same Idempotency-Key replays the 201; the same key with another body answers
 * 422. Needs a PostgreSQL server (postgres.js speaks the wire protocol).
 *
 * Run by test/guide-examples.test.ts on PostgreSQL (DATABASE_URL).
 */
import { HttpIdempotency } from 'idem';
import { PostgresStore } from 'idem/postgres';
import { postgresjs } from 'idem/postgresjs';
import postgres from 'postgres';

/** The client: its own statement_timeout (idem cannot end postgres.js's connections), NOTICEs quiet. */
export function openSql(url = process.env.DATABASE_URL!) {
  return postgres(url, { max: 10, connection: { statement_timeout: 10_000 }, onnotice: () => undefined });
}

/** A fetch handler for `POST /v1/charges`. */
export async function createCharges(sql: postgres.Sql, { table = 'idempotency_keys', charges = 'charges' } = {}) {
  const store = new PostgresStore({ client: postgresjs(sql), table });
  await store.migrate();
  await sql`CREATE TABLE IF NOT EXISTS ${sql(charges)} (id serial PRIMARY KEY, amount integer NOT NULL)`;
  const http = new HttpIdempotency({ store, required: true });

  return (request: Request) =>
    http.handle(request, async (req, idem) => {
      const { amount } = (await req.json()) as { amount: number };
      // tx: postgres.js's TransactionSql, savepoints included.
      const charge = await idem!.phase('charge_created', async (tx) => {
        const [row] = await tx`INSERT INTO ${tx(charges)} ${tx({ amount })} RETURNING id`;
        return { id: Number(row!.id), amount };
      });
      return Response.json(charge, { status: 201 });
    });
}
