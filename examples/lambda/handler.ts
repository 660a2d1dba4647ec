/**
 * The README's AWS Lambda example (run by test/lambda.test.ts): a charge created once per
 * Idempotency-Key, behind API Gateway (REST or HTTP API) or a function URL, as a plain
 * wrapped handler and as a Middy middleware. The lease covers the invocation's remaining time.
 */
import { randomUUID } from 'node:crypto';
import middy from '@middy/core';
import type { PostgresStore, Queryable } from '../../src/postgres/index.js';
import { idempotency, type IdempotencyContext, type IdempotentLambdaContext, type LambdaHttpEvent, withIdempotency } from '../../src/lambda/index.js';

type ChargeResult = { statusCode: number; headers: Record<string, string>; body: string };

/** The work: validate, then one atomic phase. Shared by both styles below. */
async function createCharge(event: LambdaHttpEvent, idem: IdempotencyContext<Queryable>): Promise<ChargeResult> {
  const raw = event.body ? Buffer.from(event.body, event.isBase64Encoded ? 'base64' : 'utf8').toString('utf8') : '{}';
  const { amount } = JSON.parse(raw) as { amount?: unknown };
  if (!Number.isInteger(amount)) return { statusCode: 400, headers: { 'content-type': 'application/json' }, body: '{"error":"amount must be an integer"}' };
  const charge = await idem.phase('charge_created', async (tx) => {
    await tx.query('SELECT 1'); // your INSERT, in the same transaction as the recovery point
    return { id: `ch_${randomUUID()}`, amount };
  });
  return { statusCode: 201, headers: { 'content-type': 'application/json', location: `/v1/charges/${charge.id}` }, body: JSON.stringify(charge) };
}

/** `export const handler = chargeHandler(store)` in your function's module. */
export function chargeHandler(store: PostgresStore) {
  return withIdempotency<Queryable>({ store, required: true }, (event, _context, idem) => createCharge(event, idem!));
}

/** The same with Middy: idem first, then your other middlewares. */
export function middyChargeHandler(store: PostgresStore) {
  return middy(async (event: LambdaHttpEvent, context: IdempotentLambdaContext<Queryable>) => createCharge(event, context.idem!)).use(
    idempotency<Queryable>({ store, required: true }),
  );
}
