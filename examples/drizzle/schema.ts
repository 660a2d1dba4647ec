/**
 * The example's tables as a Drizzle schema, in their own PostgreSQL schema `drizzle_example`
 * (so the example can share a database with examples/payments). `charges` is the merchant's
 * ledger, written in idem's atomic phases; `psp_charges` belongs to the fake payment
 * provider (another company's database in real life). idem's own table is made by
 * `PostgresStore#migrate`, not declared here.
 */
import { sql } from 'drizzle-orm';
import { bigint, jsonb, type PgDatabase, type PgQueryResultHKT, pgSchema, text, timestamp } from 'drizzle-orm/pg-core';

export const example = pgSchema('drizzle_example');

export const charges = example.table('charges', {
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
});

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

/**
 * Creates the schema and tables when missing; safe on every start, from several processes at
 * once (under an advisory lock: concurrent `CREATE … IF NOT EXISTS` can collide in pg_type).
 * A real project generates this DDL with drizzle-kit from the tables above.
 */
export async function migrateExample(db: Database): Promise<void> {
  await db.transaction(async (tx) => {
    await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext('idem:example:drizzle:migrate'))`);
    await tx.execute(sql`CREATE SCHEMA IF NOT EXISTS drizzle_example`);
    await tx.execute(sql`CREATE TABLE IF NOT EXISTS drizzle_example.charges (
      id              text        PRIMARY KEY,
      idempotency_key text        NOT NULL,
      amount          bigint      NOT NULL CHECK (amount > 0),
      currency        text        NOT NULL,
      customer        text        NOT NULL,
      metadata        jsonb       NOT NULL DEFAULT '{}'::jsonb,
      status          text        NOT NULL DEFAULT 'pending',
      psp_charge_id   text,
      created_at      timestamptz NOT NULL DEFAULT now()
    )`);
    await tx.execute(sql`CREATE TABLE IF NOT EXISTS drizzle_example.psp_charges (
      id              text        PRIMARY KEY,
      idempotency_key text        NOT NULL UNIQUE,
      amount          bigint      NOT NULL,
      currency        text        NOT NULL,
      customer        text        NOT NULL,
      created_at      timestamptz NOT NULL DEFAULT now()
    )`);
  });
}
