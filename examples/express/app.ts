/**
 * Express: `POST /v1/orders` protected by idem (`idem/express`). The order row commits together
 * with its recovery point (an atomic phase); the 201 is recorded, and a retry with the same
 * Idempotency-Key gets it back byte for byte; the same key with another body gets a 422.
 * `req.body` keeps the type the route declares (here `Order`), with idem in the handler chain.
 *
 * Run: `npx tsx examples/express/app.ts` (PostgreSQL at DATABASE_URL, else an in-memory PGlite).
 */
// #region setup
import express from 'express';
import { idempotency } from 'idem/express';
import { PostgresStore, type Queryable, type SqlClient } from 'idem/postgres';
import { isMain, openDb } from '../shared/db.js';

// #endregion setup
export interface ExpressExampleOptions {
  /** A pg.Pool or a PGlite. */
  db: SqlClient & Queryable;
  /** idem's table. @default 'idem_keys' */
  table?: string;
  /** The orders table. @default 'orders' */
  orders?: string;
}

// #region insert
interface Order {
  sku: string;
  quantity: number;
}

/** Your own data access: runs inside idem's transaction (`tx`). */
async function insertOrder(tx: Queryable, orders: string, order: Order): Promise<{ id: number } & Order> {
  const { rows } = await tx.query(`INSERT INTO "${orders}" (sku, quantity) VALUES ($1, $2) RETURNING id`, [order.sku, order.quantity]);
  return { id: Number(rows[0]!.id), ...order };
}
// #endregion insert

export async function createApp({ db, table = 'idem_keys', orders = 'orders' }: ExpressExampleOptions): Promise<express.Express> {
  // #region store
  const store = new PostgresStore({ client: db, table });
  await store.migrate(); // idempotent, safe from several hosts
  // #endregion store
  await db.query(`CREATE TABLE IF NOT EXISTS "${orders}" (id serial PRIMARY KEY, sku text NOT NULL, quantity integer NOT NULL)`);

  // #region route
  const app = express();
  const idem = idempotency<Queryable>({ store, required: true });
  app.post<'/v1/orders', Record<string, never>, unknown, Order>('/v1/orders', express.json(), idem, async (req, res) => {
    // A 4xx before any phase is not stored: the client can fix the body and retry with the same key.
    if (typeof req.body.sku !== 'string' || !Number.isInteger(req.body.quantity)) return void res.status(400).json({ error: 'sku and quantity required' });
    const order = await idem.context(res)!.phase('order_created', (tx) => insertOrder(tx, orders, req.body));
    res.status(201).json(order);
  });
  app.use(idem.onError); // after the routes: a thrown error releases the lease and answers a 500 problem
  // #endregion route
  return app;
}

// #region serve
if (isMain(import.meta.url)) {
  const app = await createApp({ db: await openDb() });
  const server = app.listen(Number(process.env.PORT ?? 3000), () => console.log(`listening on http://localhost:${process.env.PORT ?? 3000}`));
  server.keepAliveTimeout = 5000;
}
// #endregion serve
