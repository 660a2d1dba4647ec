/**
 * Koa: `POST /v1/charges` protected by idem (`idem/koa`), run by test/koa.test.ts. idem comes
 * first and reads the raw body once; @koa/bodyparser after it still parses that body. The
 * charge row commits together with its recovery point (an atomic phase); a retry with the same
 * Idempotency-Key gets the 201 back byte for byte (its Location too); another body gets a 422.
 *
 * Run: `npx tsx examples/koa/app.ts` (PostgreSQL at DATABASE_URL, else an in-memory PGlite).
 */
// #region setup
import { randomUUID } from 'node:crypto';
import { bodyParser } from '@koa/bodyparser';
import { idempotency, type IdempotencyState } from 'idem/koa';
import { PostgresStore, type Queryable, type SqlClient } from 'idem/postgres';
import Koa from 'koa';
import { isMain, openDb } from '../shared/db.js';

// #endregion setup
export interface KoaExampleOptions {
  /** A pg.Pool or a PGlite. */
  db: SqlClient & Queryable;
  /** idem's table. @default 'idem_keys' */
  table?: string;
  /** The charges table. @default 'charges' */
  charges?: string;
}

export async function createApp({ db, table = 'idem_keys', charges = 'charges' }: KoaExampleOptions): Promise<Koa<IdempotencyState<Queryable>>> {
  // #region store
  const store = new PostgresStore({ client: db, table });
  await store.migrate(); // idempotent, safe from several hosts
  // #endregion store
  await db.query(`CREATE TABLE IF NOT EXISTS "${charges}" (id text PRIMARY KEY, amount integer NOT NULL)`);

  // #region route
  const app = new Koa<IdempotencyState<Queryable>>();
  app.use(idempotency<Queryable>({ store, required: true })); // before the body parser
  app.use(bodyParser());
  app.use(async (ctx) => {
    if (ctx.method !== 'POST' || ctx.path !== '/v1/charges') ctx.throw(404);
    const { amount } = ctx.request.body as { amount?: unknown };
    if (!Number.isInteger(amount)) ctx.throw(400, 'amount must be an integer'); // not stored: fix and retry
    const charge = await ctx.state.idem!.phase('charge_created', async (tx) => {
      const id = `ch_${randomUUID()}`;
      await tx.query(`INSERT INTO "${charges}" (id, amount) VALUES ($1, $2)`, [id, amount]); // commits with the recovery point
      return { id, amount };
    });
    ctx.status = 201;
    ctx.set('location', `/v1/charges/${charge.id}`);
    ctx.body = charge;
  });
  // #endregion route
  return app;
}

// #region serve
if (isMain(import.meta.url)) {
  const app = await createApp({ db: await openDb() });
  app.listen(Number(process.env.PORT ?? 3000), () => console.log(`listening on http://localhost:${process.env.PORT ?? 3000}`));
}
// #endregion serve
