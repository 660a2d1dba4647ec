/**
 * Redis: claims, leases and replays in Redis (`idem/redis`, here on ioredis; a node-redis client
 * or either driver's Cluster works the same), phases committed atomically in the application's
 * PostgreSQL (`PostgresPhases`): the order row and the phase's recorded result commit in one
 * transaction, fenced by the Redis token. A retry with the same Idempotency-Key gets the 201
 * back byte for byte; the same key with another body gets a 422.
 *
 * Run: `REDIS_URL=redis://127.0.0.1:6379 npx tsx examples/redis/app.ts` (PostgreSQL at
 * DATABASE_URL, else an in-memory PGlite).
 */
// #region setup
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { idempotency, type IdempotencyVariables } from 'idem/hono';
import type { Queryable, SqlClient } from 'idem/postgres';
import { PostgresPhases, RedisStore } from 'idem/redis';
import { Redis } from 'ioredis';
import { isMain, openDb } from '../shared/db.js';

// #endregion setup
export interface RedisExampleOptions {
  /** A connected ioredis client (or node-redis client, or either's Cluster). */
  redis: Redis;
  /** The application's database: a pg.Pool or a PGlite. */
  db: SqlClient & Queryable;
  /** Prefix of idem's Redis keys. @default 'idem' */
  prefix?: string;
  /** The phase ledger table. @default 'idempotency_phases' */
  ledger?: string;
  /** The orders table. @default 'orders' */
  orders?: string;
}

export async function createApp({ redis, db, prefix = 'idem', ledger = 'idempotency_phases', orders = 'orders' }: RedisExampleOptions) {
  // #region store
  const phases = new PostgresPhases({ client: db, table: ledger }); // phases commit in PostgreSQL
  await phases.migrate();
  const store = new RedisStore<Queryable>({ client: redis, phases, prefix }); // claims and replays in Redis
  // #endregion store
  await db.query(`CREATE TABLE IF NOT EXISTS "${orders}" (id serial PRIMARY KEY, total integer NOT NULL)`);

  // #region route
  const app = new Hono<{ Variables: IdempotencyVariables<Queryable> }>();
  app.post('/v1/orders', idempotency({ store, required: true }), async (c) => {
    const { total } = await c.req.json<{ total?: unknown }>();
    if (!Number.isInteger(total)) return c.json({ error: 'total must be an integer' }, 400); // not stored
    // The INSERT and the phase's recorded result commit together, fenced by the Redis token.
    const order = await c.get('idem')!.phase('order_created', async (tx) => {
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
  const redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  const app = await createApp({ redis, db: await openDb() });
  serve({ fetch: app.fetch, port: Number(process.env.PORT ?? 3000) }, (info) => console.log(`listening on http://localhost:${info.port}`));
}
// #endregion serve
