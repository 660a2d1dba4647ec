/**
 * Hono: `POST /v1/orders` protected by idem (`idem/hono`). The order row commits together with
 * its recovery point (an atomic phase); the 201 is recorded, and a retry with the same
 * Idempotency-Key gets it back byte for byte; the same key with another body gets a 422.
 *
 * Run: `npx tsx examples/hono/app.ts` (PostgreSQL at DATABASE_URL, else an in-memory PGlite),
 * then `curl -i -X POST localhost:3000/v1/orders -H 'Idempotency-Key: k1' -H 'content-type: application/json' -d '{"total":1200}'`.
 */
// #region setup
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { idempotency, type IdempotencyVariables } from 'idem/hono';
import { PostgresStore, type Queryable, type SqlClient } from 'idem/postgres';
import { isMain, openDb } from '../shared/db.js';

// #endregion setup
export interface HonoExampleOptions {
  /** A pg.Pool or a PGlite. */
  db: SqlClient & Queryable;
  /** idem's table. @default 'idem_keys' */
  table?: string;
  /** The orders table. @default 'orders' */
  orders?: string;
}

export async function createApp({ db, table = 'idem_keys', orders = 'orders' }: HonoExampleOptions) {
  // #region store
  const store = new PostgresStore({ client: db, table, storeTimeoutMs: 2000 }); // a silent database answers 503 after 2 s
  await store.migrate(); // idempotent, safe from several hosts
  // #endregion store
  await db.query(`CREATE TABLE IF NOT EXISTS "${orders}" (id serial PRIMARY KEY, total integer NOT NULL)`);

  // #region route
  const app = new Hono<{ Variables: IdempotencyVariables<Queryable> }>();
  app.post('/v1/orders', idempotency({ store, required: true }), async (c) => {
    const idem = c.get('idem')!;
    const { total } = await c.req.json<{ total?: unknown }>(); // the body is still readable
    // A 4xx before any phase is not stored: the client can fix the body and retry with the same key.
    if (!Number.isInteger(total)) return c.json({ error: 'total must be an integer' }, 400);
    // Atomic phase: the order row commits together with the recovery point.
    const order = await idem.phase('order_created', async (tx) => {
      const { rows } = await tx.query(`INSERT INTO "${orders}" (total) VALUES ($1) RETURNING id`, [total]);
      return { id: Number(rows[0]!.id), total };
    });
    return c.json(order, 201);
  });
  // #endregion route
  return app;
}

// #region serve
if (isMain(import.meta.url)) {
  const app = await createApp({ db: await openDb() });
  serve({ fetch: app.fetch, port: Number(process.env.PORT ?? 3000) }, (info) => console.log(`listening on http://localhost:${info.port}`));
}
// #endregion serve
