/**
 * Type-level tests (checked by `npm run typecheck`, never run): idem/lambda's plain handler and
 * its Middy middleware fit the handler types of `@types/aws-lambda` under `--strict` (issue 25),
 * though idem declares its own structural slice of the events and does not depend on that package.
 * The README's Lambda snippet, typed as each aws-lambda handler type, must compile unchanged.
 */
import middy from '@middy/core';
import type {
  ALBEvent,
  ALBHandler,
  ALBResult,
  APIGatewayProxyEvent,
  APIGatewayProxyEventV2,
  APIGatewayProxyHandler,
  APIGatewayProxyHandlerV2,
  APIGatewayProxyResult,
  APIGatewayProxyStructuredResultV2,
  Context,
} from 'aws-lambda';
import type { PostgresStore, Queryable } from '../src/postgres/index.js';
import { idempotency, type IdempotencyContext, type LambdaHttpEvent, withIdempotency } from '../src/lambda/index.js';

declare const store: PostgresStore;
declare function createCharge(
  event: LambdaHttpEvent,
  idem: IdempotencyContext<Queryable>,
): Promise<{ statusCode: number; headers: Record<string, string>; body: string }>;

// The plain wrapper, typed as each aws-lambda handler (its event and context types inferred).
export const v1: APIGatewayProxyHandler = withIdempotency<Queryable>({ store, required: true }, (event, _context, idem) => createCharge(event, idem!));
export const v2: APIGatewayProxyHandlerV2 = withIdempotency<Queryable>({ store, required: true }, (event, _context, idem) => createCharge(event, idem!));
export const alb: ALBHandler = withIdempotency<Queryable>({ store, required: true }, (event, _context, idem) => createCharge(event, idem!));

// The aws-lambda event and context reach the handler with their own types.
export const typedEvents: APIGatewayProxyHandler = withIdempotency<Queryable, APIGatewayProxyEvent, Context, APIGatewayProxyResult>(
  { store },
  async (event, context, idem) => {
    const stage: string = event.requestContext.stage;
    const fn: string = context.functionName;
    return { statusCode: idem ? 201 : 200, body: `${stage} ${fn}` };
  },
);
export const typedV2: APIGatewayProxyHandlerV2 = withIdempotency<Queryable, APIGatewayProxyEventV2, Context, APIGatewayProxyStructuredResultV2>(
  { store },
  async (event) => ({ statusCode: 200, body: event.requestContext.http.method }),
);
export const typedAlb: ALBHandler = withIdempotency<Queryable, ALBEvent, Context, ALBResult>({ store }, async (event) => ({
  statusCode: 200,
  body: event.requestContext.elb.targetGroupArn,
}));

// The README's Middy handler, with the aws-lambda Context in the handler's type.
export const middyHandler = middy(async (event: LambdaHttpEvent, context: Context & { idem?: IdempotencyContext<Queryable> }) =>
  createCharge(event, context.idem!),
).use(idempotency<Queryable>({ store, required: true }));

// Middy with the aws-lambda event and context types, as Middy's docs write it.
export const middyV2 = middy<APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2, Error, Context & { idem?: IdempotencyContext<Queryable> }>()
  .use(idempotency<Queryable>({ store, required: true }))
  .handler(async (event, context) => ({ statusCode: context.idem ? 201 : 200, body: event.rawPath }));
export const middyV1 = middy<APIGatewayProxyEvent, APIGatewayProxyResult>()
  .use(idempotency<Queryable>({ store }))
  .handler(async (event) => ({ statusCode: 200, body: event.path }));
export const middyAsV2: APIGatewayProxyHandlerV2 = middyV2;
