/**
 * Kysely: `POST /v1/charges` on the web-standard core (`HttpIdempotency`), its charge row inserted
 * with Kysely's own `Transaction<DB>` (typed from your database) in an atomic phase. A retry with
 * the same Idempotency-Key replays the 201; the same key with another body answers 422. Any
 * PostgreSQL dialect: `PostgresDialect` on a `pg.Pool`, or `PGliteDialect` (used here).
 *
 * Run by test/guide-examples.test.ts (on PGlite, no server needed).
 */
import { PGlite } from '@electric-sql/pglite';
import { HttpIdempotency } from 'idem';
import { kysely } from 'idem/kysely';
import { PostgresStore } from 'idem/postgres';
import { type Generated, Kysely, PGliteDialect, sql } from 'kysely';

export interface DB {
  charges: { id: Generated<number>; amount: number };
}

/** A fetch handler for `POST /v1/charges`; pass the `Kysely` instance, not a `Transaction`. */
export async function createCharges(db = new Kysely<DB>({ dialect: new PGliteDialect({ pglite: new PGlite() }) })) {
  const store = new PostgresStore({ client: kysely(db) });
  await store.migrate();
  await sql`CREATE TABLE IF NOT EXISTS charges (id serial PRIMARY KEY, amount integer NOT NULL)`.execute(db);
  const http = new HttpIdempotency({ store, required: true });

  const handle = (request: Request) =>
    http.handle(request, async (req, idem) => {
      const { amount } = (await req.json()) as { amount: number };
      // tx: Kysely's Transaction<DB>; the insert commits with the recovery point, or not at all.
      const charge = await idem!.phase('charge_created', async (tx) => {
        const row = await tx.insertInto('charges').values({ amount }).returning('id').executeTakeFirstOrThrow();
        return { id: row.id, amount };
      });
      return Response.json(charge, { status: 201 });
    });
  return { handle, db };
}
