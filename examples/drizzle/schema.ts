/**
 * The example's tables as a Drizzle schema, in their own PostgreSQL schema `drizzle_example`
 * (so the example can share a database with examples/payments). `charges` is the merchant's
 * ledger, written in idem's atomic phases; `psp_charges` belongs to the fake payment
 * provider (another company's database in real life). migrations/ holds their DDL as
 * drizzle-kit generates it; idem's own table is made by `PostgresStore#migrate`.
 */
import { sql } from 'drizzle-orm';
import { bigint, check, jsonb, type PgDatabase, type PgQueryResultHKT, pgSchema, text, timestamp } from 'drizzle-orm/pg-core';

export const example = pgSchema('drizzle_example');

export const charges = example.table(
  'charges',
  {
    id: text('id').primaryKey(),
    idempotencyKey: text('idempotency_key').notNull(),
    amount: bigint('amount', { mode: 'number' }).notNull(),
    currency: text('currency').notNull(),
    customer: text('customer').notNull(),
    metadata: jsonb('metadata').$type<Record<string, string>>().notNull().default({}),
    status: text('status', { enum: ['pending', 'succeeded'] })
      .notNull()
      .default('pending'),
    pspChargeId: text('psp_charge_id'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [check('charges_amount_positive', sql`${t.amount} > 0`)],
);

export const pspCharges = example.table('psp_charges', {
  id: text('id').primaryKey(),
  idempotencyKey: text('idempotency_key').notNull().unique(),
  amount: bigint('amount', { mode: 'number' }).notNull(),
  currency: text('currency').notNull(),
  customer: text('customer').notNull(),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
});

export const schema = { charges, pspCharges };

/**
 * The database the example runs on: Drizzle with this schema, on any PostgreSQL driver
 * (node-postgres, postgres.js and PGlite databases all are one).
 */
export type Database = PgDatabase<PgQueryResultHKT, typeof schema>;
