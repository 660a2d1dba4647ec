/**
 * Hono middleware: a thin layer over the web-standard core.
 *
 * @example
 * ```ts
 * import { idempotency, type IdempotencyVariables } from 'idem/hono';
 * const app = new Hono<{ Variables: IdempotencyVariables<Queryable> }>();
 * app.post('/v1/charges', idempotency({ store, required: true }), async (c) => {
 *   const idem = c.get('idem')!;
 *   const charge = await idem.phase('charge_created', (tx) => insertCharge(tx));
 *   return c.json(charge, 201);
 * });
 * ```
 */
import type { MiddlewareHandler } from 'hono';
import { HttpIdempotency, type IdempotencyOptions } from '../http/idempotency.js';
import type { IdempotencyContext } from '../http/context.js';

/** Context variables the middleware sets: `c.get('idem')`, `undefined` when the request is unprotected. */
export type IdempotencyVariables<Tx = unknown> = { idem: IdempotencyContext<Tx> | undefined };

/**
 * Creates the middleware. The body is read once through `c.req.arrayBuffer()`, which Hono
 * caches, so `c.req.json()` still works in the handler. A thrown `HTTPException` counts as
 * the response it carries. Any other handler error (caught by Hono and exposed as `c.error`)
 * releases the lease and answers a 500 problem (or is stored, with
 * `onThrow: 'store'`).
 *
 * @throws {InvalidOptionError} at creation for bad options
 */
export function idempotency<Tx = unknown>(options: IdempotencyOptions<Tx>): MiddlewareHandler<{ Variables: IdempotencyVariables<Tx> }> {
  const core = new HttpIdempotency<Tx>(options);
  return async function idempotencyMiddleware(c, next) {
    if (!core.protects(c.req.method)) return next();
    const body = new Uint8Array(await c.req.arrayBuffer());
    const prepared = await core.prepare({
      method: c.req.method,
      url: c.req.url,
      headers: c.req.raw.headers,
      body: body.length > 0 ? body : null,
    });
    if (prepared.kind === 'pass') return next();
    if (prepared.kind === 'respond') return prepared.response;
    c.set('idem', prepared.context);
    try {
      await next();
    } catch (thrown) {
      // Hono rethrows what is not an Error (its compose only catches Errors): still release.
      c.res = undefined;
      c.res = await prepared.fail(thrown);
      return;
    }
    // An HTTPException is a deliberate response (e.g. a validator's 400), not a crash.
    const crashed = c.error !== undefined && typeof (c.error as { getResponse?: unknown }).getResponse !== 'function';
    const outcome = crashed ? await prepared.fail(c.error) : await prepared.complete(c.res);
    c.res = undefined; // replace, do not merge headers of the consumed response
    c.res = outcome;
  };
}

export { HttpIdempotency, type IdempotencyOptions } from '../http/idempotency.js';
export type { IdempotencyContext } from '../http/context.js';
