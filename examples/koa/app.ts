/**
 * The README's Koa example (run by test/koa.test.ts): a charge created once per
 * Idempotency-Key. idem comes first and reads the raw body once; @koa/bodyparser after it
 * still parses that body.
 */
import { randomUUID } from 'node:crypto';
import Koa from 'koa';
import { bodyParser } from '@koa/bodyparser';
import type { PostgresStore, Queryable } from '../../src/postgres/index.js';
import { idempotency, type IdempotencyState } from '../../src/koa/index.js';

export function createApp(store: PostgresStore): Koa<IdempotencyState<Queryable>> {
  const app = new Koa<IdempotencyState<Queryable>>();
  app.use(idempotency<Queryable>({ store, required: true }));
  app.use(bodyParser());
  app.use(async (ctx) => {
    if (ctx.method !== 'POST' || ctx.path !== '/v1/charges') ctx.throw(404);
    const { amount } = ctx.request.body as { amount?: unknown };
    if (!Number.isInteger(amount)) ctx.throw(400, 'amount must be an integer'); // not stored: fix and retry
    const charge = await ctx.state.idem!.phase('charge_created', async (tx) => {
      await tx.query('SELECT 1'); // your INSERT, in the same transaction as the recovery point
      return { id: `ch_${randomUUID()}`, amount };
    });
    ctx.status = 201;
    ctx.set('location', `/v1/charges/${charge.id}`);
    ctx.body = charge;
  });
  return app;
}
