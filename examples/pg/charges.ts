/**
 * pg (node-postgres): `POST /v1/charges` on the web-standard core (`HttpIdempotency`, any
 * fetch-style runtime), its charge row inserted through the pool's own transaction in an atomic
 * phase: the row and idem's recovery point commit together, or not at all. A retry with the same
 * Idempotency-Key replays the 201; the same key with another body answers 422.
 *
 * Run by test/guide-examples.test.ts on PostgreSQL (DATABASE_URL).
 */
import { HttpIdempotency } from 'idem';
import { PostgresStore } from 'idem/postgres';
import pg from 'pg';

export interface PgChargesOptions {
  /** idem's table. @default 'idempotency_keys' */
  table?: string;
  /** The charges table. @default 'charges' */
  charges?: string;
}

/** A fetch handler for `POST /v1/charges` over a `pg.Pool` (not a single `pg.Client`). */
export async function createCharges(pool: pg.Pool, { table = 'idempotency_keys', charges = 'charges' }: PgChargesOptions = {}) {
  const store = new PostgresStore({ client: pool, table, storeTimeoutMs: 2000 });
  await store.migrate(); // idempotent, safe from several hosts
  await pool.query(`CREATE TABLE IF NOT EXISTS "${charges}" (id serial PRIMARY KEY, amount integer NOT NULL)`);
  const http = new HttpIdempotency({ store, required: true });

  return (request: Request) =>
    http.handle(request, async (req, idem) => {
      const { amount } = (await req.json()) as { amount: number };
      // tx: a connection of the pool inside idem's transaction.
      const charge = await idem!.phase('charge_created', async (tx) => {
        const { rows } = await tx.query(`INSERT INTO "${charges}" (amount) VALUES ($1) RETURNING id`, [amount]);
        return { id: Number(rows[0]!.id), amount };
      });
      return Response.json(charge, { status: 201 });
    });
}

/** The pool idem and the app share: a silent database fails fast instead of hanging. */
export function openPool(connectionString = process.env.DATABASE_URL): pg.Pool {
  const pool = new pg.Pool({ connectionString, max: 10, connectionTimeoutMillis: 2000, query_timeout: 5000 });
  pool.on('error', (error) => console.error('idle database connection lost', error.message));
  return pool;
}
