// Type-checked by scripts/check-pack.sh against the packed tarball, strict and NodeNext, in a
// project that also installs @types/aws-lambda and @types/express (issue 25): the README's Lambda
// handlers typed as aws-lambda's handler types, and its Express route, whose `req.body` must stay
// the app's type (Express's `any`) with idem in the handler chain.
import middy from '@middy/core';
import type { APIGatewayProxyHandler, APIGatewayProxyHandlerV2, ALBHandler, Context } from 'aws-lambda';
import express from 'express';
import { idempotency as expressIdempotency } from 'idem/express';
import { type IdempotencyContext, type IdempotentLambdaContext, type LambdaHttpEvent, idempotency, withIdempotency } from 'idem/lambda';
import { PostgresStore, type Queryable, type SqlClient } from 'idem/postgres';

declare const sqlClient: SqlClient;
const store = new PostgresStore({ client: sqlClient });

type ChargeResult = { statusCode: number; headers: Record<string, string>; body: string };
async function createCharge(event: LambdaHttpEvent, idem: IdempotencyContext<Queryable>): Promise<ChargeResult> {
  const charge = await idem.phase('charge_created', async (tx) => (await tx.query('SELECT 1')).rows.length);
  return { statusCode: 201, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ charge, body: event.body }) };
}

// Lambda: the plain wrapper as each aws-lambda handler type.
export const handler: APIGatewayProxyHandler = withIdempotency<Queryable>({ store, required: true }, (event, _context, idem) => createCharge(event, idem!));
export const handlerV2: APIGatewayProxyHandlerV2 = withIdempotency<Queryable>({ store, required: true }, (event, _context, idem) => createCharge(event, idem!));
export const handlerAlb: ALBHandler = withIdempotency<Queryable>({ store, required: true }, (event, _context, idem) => createCharge(event, idem!));

// Lambda with Middy: the README's handler, then one with aws-lambda's own Context.
export const middyHandler = middy(async (event: LambdaHttpEvent, context: IdempotentLambdaContext<Queryable>) => createCharge(event, context.idem!)).use(
  idempotency<Queryable>({ store, required: true }),
);
export const middyContext = middy(async (event: LambdaHttpEvent, context: Context & IdempotentLambdaContext<Queryable>) =>
  createCharge(event, context.idem!),
).use(idempotency<Queryable>({ store, required: true }));

// Express: the README's route; insertOrder takes the app's order type.
interface Order {
  sku: string;
  quantity: number;
}
async function insertOrder(tx: Queryable, order: Order): Promise<{ id: number }> {
  await tx.query('INSERT INTO orders (sku, quantity) VALUES ($1, $2)', [order.sku, order.quantity]);
  return { id: 1 };
}
const app = express();
const idem = expressIdempotency<Queryable>({ store, required: true });
app.post('/v1/orders', express.json(), idem, async (req, res) => {
  const order = await idem.context(res)!.phase('order_created', (tx) => insertOrder(tx, req.body));
  res.status(201).json(order);
});
app.use(idem.onError);
