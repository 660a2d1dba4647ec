-- The example's tables (schema.ts), as drizzle-kit generates them; applied by Drizzle's
-- migrator (`migrate(db, { migrationsFolder })`, see server.ts).
CREATE SCHEMA IF NOT EXISTS "drizzle_example";
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "drizzle_example"."charges" (
	"id" text PRIMARY KEY NOT NULL,
	"idempotency_key" text NOT NULL,
	"amount" bigint NOT NULL,
	"currency" text NOT NULL,
	"customer" text NOT NULL,
	"metadata" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"psp_charge_id" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "charges_amount_positive" CHECK ("amount" > 0)
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "drizzle_example"."psp_charges" (
	"id" text PRIMARY KEY NOT NULL,
	"idempotency_key" text NOT NULL,
	"amount" bigint NOT NULL,
	"currency" text NOT NULL,
	"customer" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "psp_charges_idempotency_key_unique" UNIQUE("idempotency_key")
);
