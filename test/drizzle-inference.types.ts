/**
 * Type-level tests for idem/drizzle (checked by `npm run typecheck`, never run): a phase's `tx`
 * is Drizzle's transaction on the database given to `drizzle(db)`, with its schema, inferred
 * through the store without casts or explicit generics. Each `@ts-expect-error` fails the
 * typecheck when the inferred type widens (to `any` or `unknown`) or is wrong.
 */
import type { PGlite } from '@electric-sql/pglite';
import { eq } from 'drizzle-orm';
import { drizzle as onNodePostgres } from 'drizzle-orm/node-postgres';
import { drizzle as onPglite } from 'drizzle-orm/pglite';
import { drizzle as onPostgresJs } from 'drizzle-orm/postgres-js';
import type { Hono } from 'hono';
import type pg from 'pg';
import type postgres from 'postgres';
import { charges, schema } from '../examples/drizzle/schema.js';
import { drizzle } from '../src/drizzle/index.js';
import { type IdempotencyVariables, idempotency } from '../src/hono/index.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { TxOf } from '../src/store/types.js';

declare const pool: pg.Pool;
declare const sql: postgres.Sql;
declare const lite: PGlite;

export function onEveryDriver(): void {
  const stores = [
    new PostgresStore({ client: drizzle(onNodePostgres(pool, { schema })) }),
    new PostgresStore({ client: drizzle(onPostgresJs(sql, { schema })) }),
    new PostgresStore({ client: drizzle(onPglite(lite, { schema })) }),
  ] as const;
  void new IdempotencyEngine({ store: stores[0] }).takeOver({ scope: 's', key: 'k', token: 1 }).then((run) =>
    run?.phase('p', async (tx) => {
      await tx.insert(charges).values({ id: 'ch_1', idempotencyKey: 'k', amount: 1, currency: 'usd', customer: 'c' });
      // @ts-expect-error the row's columns are checked: amount is a number
      await tx.insert(charges).values({ id: 'ch_1', idempotencyKey: 'k', amount: 'one', currency: 'usd', customer: 'c' });
      return tx.query.charges.findFirst({ where: eq(charges.id, 'ch_1') }); // the schema's relational queries
    }),
  );
  void new IdempotencyEngine({ store: stores[1] })
    .takeOver({ scope: 's', key: 'k', token: 1 })
    .then((run) => run?.phase('p', (tx) => tx.select().from(charges).where(eq(charges.customer, 'c'))));
  void new IdempotencyEngine({ store: stores[2] }).takeOver({ scope: 's', key: 'k', token: 1 }).then((run) =>
    // @ts-expect-error no such column
    run?.phase('p', (tx) => tx.update(charges).set({ nope: 1 })),
  );
}

export function honoInfersTheTransaction(): void {
  const store = new PostgresStore({ client: drizzle(onNodePostgres(pool, { schema })) });
  const app = null as unknown as Hono<{ Variables: IdempotencyVariables<TxOf<typeof store>> }>;
  app.post('/v1/charges', idempotency({ store }), async (c) => {
    const idem = c.get('idem')!;
    await idem.phase('charge', (tx) => tx.update(charges).set({ status: 'succeeded' }).where(eq(charges.id, 'ch_1')));
    // @ts-expect-error tx is Drizzle's transaction, not a Queryable: `query` is its relational API
    await idem.phase('raw', (tx) => tx.query('SELECT 1'));
    // @ts-expect-error status is an enum of the schema
    await idem.phase('bad', (tx) => tx.update(charges).set({ status: 'lost' }));
    return c.text('ok');
  });
}
