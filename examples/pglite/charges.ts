/**
 * PGlite (PostgreSQL in WebAssembly, in this process): `POST /v1/charges` on the web-standard
 * core (`HttpIdempotency`), its charge row inserted in PGlite's transaction in an atomic phase.
 * A retry with the same Idempotency-Key replays the 201; the same key with another body answers
 * 422. One process per data directory.
 *
 * Run by test/guide-examples.test.ts (no server needed).
 */
import { PGlite } from '@electric-sql/pglite';
import { HttpIdempotency } from 'idem';
import { PostgresStore } from 'idem/postgres';

/** A fetch handler for `POST /v1/charges`; `dataDir` undefined keeps the database in memory. */
export async function createCharges(dataDir?: string) {
  const db = await PGlite.create(dataDir); // e.g. './data'
  const store = new PostgresStore({ client: db });
  await store.migrate();
  await db.query('CREATE TABLE IF NOT EXISTS charges (id serial PRIMARY KEY, amount integer NOT NULL)');
  const http = new HttpIdempotency({ store, required: true });

  const handle = (request: Request) =>
    http.handle(request, async (req, idem) => {
      const { amount } = (await req.json()) as { amount: number };
      // tx: PGlite's transaction.
      const charge = await idem!.phase('charge_created', async (tx) => {
        const { rows } = await tx.query('INSERT INTO charges (amount) VALUES ($1) RETURNING id', [amount]);
        return { id: Number(rows[0]!.id), amount };
      });
      return Response.json(charge, { status: 201 });
    });
  return { handle, db };
}
