/**
 * AWS Lambda: a charge created once per Idempotency-Key, behind API Gateway (REST or HTTP API),
 * an ALB or a function URL, with idem's plain wrapper (`idem/lambda`); run by test/lambda.test.ts.
 * The lease covers the invocation's remaining time. The same with Middy: examples/lambda/middy.ts.
 * Deploy `handler`; create the tables once at deploy time (`npx idem migrate`, `migrateCharges`).
 */
// #region handler
import type { APIGatewayProxyHandlerV2 } from 'aws-lambda';
import { withIdempotency } from 'idem/lambda';
import { PostgresStore, type Queryable } from 'idem/postgres';
import pg from 'pg';
import { createCharge } from './charge.js';

/** The handler for a store (and a charges table). */
export function chargeHandler(store: PostgresStore, charges?: string) {
  return withIdempotency<Queryable>({ store, required: true }, (event, _context, idem) => createCharge(event, idem!, charges));
}

// Module scope: one small pool per execution environment, reused by warm invocations.
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2, connectionTimeoutMillis: 2000 });
export const handler: APIGatewayProxyHandlerV2 = chargeHandler(new PostgresStore({ client: pool }));
// #endregion handler
