/**
 * Next.js App Router route handlers: a thin wrapper over the web-standard core.
 *
 * @example
 * ```ts
 * // app/api/charges/route.ts
 * import { withIdempotency } from 'idem/next';
 * export const POST = withIdempotency<Queryable>({ store, required: true }, async (request, ctx, idem) => {
 *   const body = await request.json();
 *   const charge = await idem!.phase('charge_created', (tx) => insertCharge(tx, body));
 *   return Response.json(charge, { status: 201 });
 * });
 * ```
 */
import type { IdempotencyContext } from '../http/context.js';
import { HttpIdempotency, type IdempotencyOptions } from '../http/idempotency.js';

/**
 * A route handler with the idempotency context as a third argument (`undefined` when the
 * request is unprotected). `R` is Next's request (`NextRequest` extends `Request`), `C` its
 * second argument (`{ params: Promise<...> }`).
 */
export type IdempotentRouteHandler<Tx, R extends Request, C> = (request: R, ctx: C, idem: IdempotencyContext<Tx> | undefined) => Response | Promise<Response>;

/**
 * Wraps a route handler: `export const POST = withIdempotency(options, handler)`. The body
 * is read from a clone of the request (fingerprint, protocol.md K2), so the handler still
 * reads `request.json()` / `request.formData()` from Next's own request. The handler's
 * Response is recorded before it is returned (its body is read whole first), so every retry
 * gets the same status, bytes and allow-listed headers. A thrown error releases the lease and
 * answers a 500 problem (protocol.md H10), or is stored with `onThrow: 'store'`; Next's own
 * control-flow errors (`redirect()`, `notFound()`) release the lease and are rethrown for
 * Next to handle.
 *
 * Create the wrapper once per module (at import), not per request: it holds the engine.
 *
 * @throws {InvalidOptionError} at creation for bad options
 */
export function withIdempotency<Tx = unknown, R extends Request = Request, C = unknown>(
  options: IdempotencyOptions<Tx>,
  handler: IdempotentRouteHandler<Tx, R, C>,
): (request: R, ctx: C) => Promise<Response> {
  const core = new HttpIdempotency<Tx>(options);
  return async function idempotentRoute(request, ctx) {
    if (!core.protects(request.method)) return handler(request, ctx, undefined);
    const body = request.body ? new Uint8Array(await request.clone().arrayBuffer()) : null;
    const prepared = await core.prepare({ method: request.method, url: request.url, headers: request.headers, body: body && body.length > 0 ? body : null });
    if (prepared.kind === 'pass') return handler(request, ctx, undefined);
    if (prepared.kind === 'respond') return prepared.response;
    let response: Response;
    try {
      response = await handler(request, ctx, prepared.context);
    } catch (error) {
      if (isNextControlFlow(error)) {
        await prepared.context.execution.release().catch(() => undefined);
        throw error;
      }
      return prepared.fail(error);
    }
    return prepared.complete(response);
  };
}

/** `redirect()`, `notFound()` and the like throw errors whose `digest` starts with `NEXT_`. */
function isNextControlFlow(error: unknown): boolean {
  const digest = (error as { digest?: unknown } | null)?.digest;
  return typeof digest === 'string' && digest.startsWith('NEXT_');
}

export { HttpIdempotency, type IdempotencyOptions } from '../http/idempotency.js';
export type { IdempotencyContext } from '../http/context.js';
