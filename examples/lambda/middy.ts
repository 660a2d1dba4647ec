/**
 * AWS Lambda with Middy: idem's middleware (`idem/lambda`) first, then your other middlewares;
 * run by test/lambda.test.ts. A replay or one of idem's problems returns early (the handler
 * does not run); `onError` releases the lease and answers the 500 problem. The work is
 * examples/lambda/charge.ts, as in the plain handler (examples/lambda/handler.ts).
 */
// #region handler
import middy from '@middy/core';
import type { APIGatewayProxyHandlerV2, Context } from 'aws-lambda';
import { idempotency, type IdempotentLambdaContext, type LambdaHttpEvent } from 'idem/lambda';
import { PostgresStore, type Queryable } from 'idem/postgres';
import pg from 'pg';
import { createCharge } from './charge.js';

/** The Middy handler for a store (and a charges table). */
export function middyChargeHandler(store: PostgresStore, charges?: string) {
  return middy(async (event: LambdaHttpEvent, context: Context & IdempotentLambdaContext<Queryable>) => createCharge(event, context.idem!, charges)).use(
    idempotency<Queryable>({ store, required: true }),
  );
}

// Module scope: one small pool per execution environment, reused by warm invocations.
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2, connectionTimeoutMillis: 2000 });
export const handler: APIGatewayProxyHandlerV2 = middyChargeHandler(new PostgresStore({ client: pool }));
// #endregion handler
