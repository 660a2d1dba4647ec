/**
 * Fastify example: `POST /v1/orders` protected by idem (`idem/fastify`), run by
 * test/fastify.test.ts. The order row commits with its recovery point (an atomic phase); the
 * 201 is recorded before it is sent, and a retry with the same key gets it back byte for byte.
 * A 4xx answered before any phase (here Fastify's schema validation) is not stored.
 *
 * Run: `npx tsx examples/fastify/app.ts` (PostgreSQL at DATABASE_URL, else an in-memory PGlite).
 */
// #region setup
import Fastify, { type FastifyInstance } from 'fastify';
import { idempotency } from 'idem/fastify';
import { PostgresStore, type Queryable, type SqlClient } from 'idem/postgres';
import { isMain, openDb } from '../shared/db.js';

// Types `request.idem` in every route with the store's transaction handle.
declare module 'idem/fastify' {
  interface IdempotencyRegister {
    tx: Queryable;
  }
}
// #endregion setup

export interface FastifyExampleOptions {
  /** pg.Pool or PGlite. */
  db: SqlClient & Queryable;
  /** idem's table. @default 'idem_keys' */
  table?: string;
  /** The orders table. @default 'orders' */
  orders?: string;
}

export async function buildApp({ db, table = 'idem_keys', orders = 'orders' }: FastifyExampleOptions): Promise<FastifyInstance> {
  // #region store
  const store = new PostgresStore({ client: db, table });
  await store.migrate(); // idempotent, safe from several hosts
  // #endregion store
  await db.query(`CREATE TABLE IF NOT EXISTS "${orders}" (id serial PRIMARY KEY, total integer NOT NULL)`);

  // #region route
  const app = Fastify();
  await app.register(idempotency, { store, required: true });

  app.post<{ Body: { total: number } }>(
    '/v1/orders',
    {
      config: { idempotency: true }, // or register with { all: true } to protect the whole scope
      schema: { body: { type: 'object', required: ['total'], properties: { total: { type: 'integer', minimum: 1 } } } },
    },
    async (request, reply) => {
      const order = await request.idem!.phase('order_created', async (tx) => {
        const { rows } = await tx.query(`INSERT INTO "${orders}" (total) VALUES ($1) RETURNING id`, [request.body.total]);
        return { id: Number(rows[0]!.id), total: request.body.total };
      });
      return reply.code(201).send(order);
    },
  );
  // #endregion route
  return app;
}

// #region serve
if (isMain(import.meta.url)) {
  const app = await buildApp({ db: await openDb() });
  console.log(`listening on ${await app.listen({ port: Number(process.env.PORT ?? 3000) })}`);
}
// #endregion serve
