/**
 * AWS Lambda behind API Gateway (REST API 1.0 and HTTP API 2.0 proxy events) and Lambda
 * function URLs: a handler wrapper, and a Middy middleware. A thin layer over the
 * web-standard core; no AWS SDK, no cloud.
 *
 * The lease defaults to the invocation's remaining time (`context.getRemainingTimeInMillis()`)
 * plus {@link LambdaIdempotencyOptions.leaseMarginMs}, with no heartbeat: Lambda ends the
 * invocation at its timeout, so the key stays exclusive exactly as long as the invocation can
 * still be running, and a retry takes over only an invocation that is gone (protocol.md K7).
 * A lease shorter than the remaining time would let a retry take over a live invocation and
 * run the work twice; a lease with no end keeps a crashed invocation's key blocked. Powertools
 * for AWS Lambda (TypeScript, 2.35) keeps the same field (its in-progress expiry): it is set
 * only when the Lambda context was registered, and its handler compares it with
 * `new Date().getUTCMilliseconds()` (the millisecond field, 0-999) instead of the current time.
 * Here the lease is always set from the context and compared on the database's clock.
 *
 * @example
 * ```ts
 * import { withIdempotency } from 'idem/lambda';
 * export const handler = withIdempotency<Queryable>({ store, required: true }, async (event, context, idem) => {
 *   const charge = await idem!.phase('charge_created', (tx) => insertCharge(tx, JSON.parse(event.body!)));
 *   return { statusCode: 201, headers: { 'content-type': 'application/json' }, body: JSON.stringify(charge) };
 * });
 * ```
 */
import { resolveKeyHeader } from '../http/key-header.js';
import { InvalidOptionError } from '../core/errors.js';
import type { IdempotencyContext } from '../http/context.js';
import { HttpIdempotency, type IdempotencyOptions, type Prepared } from '../http/idempotency.js';
import { eventRequest, isHttpEvent, isV2, type LambdaHttpEvent, resultResponse, responseResult } from './events.js';
import { invocationLeaseMs, type LambdaContextLike } from './invocation.js';

export { invocationLeaseMs, type LambdaContextLike } from './invocation.js';

/** Options of the Lambda adapter: the HTTP options, with the lease taken from the invocation. */
export interface LambdaIdempotencyOptions<Tx = unknown> extends IdempotencyOptions<Tx> {
  /**
   * A fixed lease in ms instead of the invocation's remaining time. Keep it at least as long
   * as the function's timeout, or a retry can take over an invocation that is still running.
   * @default context.getRemainingTimeInMillis() + leaseMarginMs
   */
  leaseMs?: number;
  /**
   * Added to the remaining time: covers the time Lambda takes to stop an invocation that ran
   * out of time.
   * @default 1000
   */
  leaseMarginMs?: number;
  /**
   * Wait mode (`inProgress.wait`, protocol.md K17): a duplicate waits at most the invocation's
   * remaining time less this margin, so it answers (409 when the first has not finished) before
   * Lambda ends the invocation.
   * @default 1000
   */
  waitMarginMs?: number;
}

/** A Lambda HTTP handler; `idem` is `undefined` when the request is unprotected. */
export type IdempotentLambdaHandler<E extends LambdaHttpEvent, C extends LambdaContextLike, R, Tx> = (
  event: E,
  context: C,
  idem: IdempotencyContext<Tx> | undefined,
) => Promise<R> | R;

/** How long a duplicate may wait in an invocation (protocol.md K17): its remaining time less the margin; no limit without a context. */
function waitLimits(options: LambdaIdempotencyOptions<unknown>, context: LambdaContextLike | undefined): { maxWaitMs?: number } | undefined {
  const margin = options.waitMarginMs ?? 1000;
  if (!(Number.isFinite(margin) && margin >= 0)) throw new InvalidOptionError('idem: waitMarginMs must be a number of milliseconds >= 0');
  const remaining = typeof context?.getRemainingTimeInMillis === 'function' ? context.getRemainingTimeInMillis() : undefined;
  return remaining === undefined || !Number.isFinite(remaining) ? undefined : { maxWaitMs: Math.max(0, remaining - margin) };
}

/** Builds the cores: a fixed one, or one per invocation with the lease from its remaining time. */
function cores<Tx>(options: LambdaIdempotencyOptions<Tx>): (context: LambdaContextLike | undefined) => HttpIdempotency<Tx> {
  const { leaseMarginMs = 1000, waitMarginMs: _waitMargin, ...http } = options;
  if (!(Number.isFinite(leaseMarginMs) && leaseMarginMs >= 0)) throw new InvalidOptionError('idem: leaseMarginMs must be a number of milliseconds >= 0');
  const fixed = new HttpIdempotency<Tx>(http); // validates the options at start-up
  if (http.engine || http.leaseMs !== undefined) return () => fixed;
  return (context) => {
    const remaining = typeof context?.getRemainingTimeInMillis === 'function' ? context.getRemainingTimeInMillis() : undefined;
    if (remaining === undefined || !Number.isFinite(remaining)) return fixed;
    // The heartbeat is off: the lease covers the whole invocation, and a frozen sandbox could not beat anyway.
    return new HttpIdempotency<Tx>({ ...http, leaseMs: invocationLeaseMs(remaining, leaseMarginMs), heartbeatMs: 0 });
  };
}

/**
 * Wraps a Lambda HTTP handler. The event's body (base64-decoded when `isBase64Encoded`) is
 * fingerprinted with its method, path and query; the handler runs with the context as its
 * third argument, and its result is recorded before it is returned, so every retry gets the
 * same status, bytes and allow-listed headers. idem's own answers (replays, problems) come
 * back in the event's format. An event that is not an HTTP event passes through unprotected.
 *
 * @throws {InvalidOptionError} at creation for bad options
 */
// biome-ignore lint/suspicious/noExplicitAny: R defaults to any, as aws-lambda's own `Handler` result does, so `withIdempotency<Tx>(…)` fits every aws-lambda handler type
export function withIdempotency<Tx = unknown, E extends LambdaHttpEvent = LambdaHttpEvent, C extends LambdaContextLike = LambdaContextLike, R = any>(
  options: LambdaIdempotencyOptions<Tx>,
  handler: IdempotentLambdaHandler<E, C, R, Tx>,
): (event: E, context: C) => Promise<R> {
  const coreFor = cores(options);
  const keyHeader = resolveKeyHeader(options);
  waitLimits(options as LambdaIdempotencyOptions<unknown>, undefined); // validates the margin at start-up
  return async function idempotentHandler(event, context) {
    if (!isHttpEvent(event)) return handler(event, context, undefined);
    const core = coreFor(context);
    const request = eventRequest(event, keyHeader);
    if (!core.protects(request.method)) return handler(event, context, undefined);
    const prepared = await core.prepare(request, waitLimits(options as LambdaIdempotencyOptions<unknown>, context));
    if (prepared.kind === 'pass') return handler(event, context, undefined);
    if (prepared.kind === 'respond') return (await responseResult(prepared.response, isV2(event))) as R;
    let response: Response;
    try {
      response = resultResponse(await handler(event, context, prepared.context), isV2(event));
    } catch (error) {
      return (await responseResult(await prepared.fail(error), isV2(event))) as R;
    }
    return (await responseResult(await prepared.complete(response), isV2(event))) as R;
  };
}

/** The slice of a Middy request used here. */
export interface MiddyRequestLike {
  event: unknown;
  // biome-ignore lint/suspicious/noExplicitAny: Middy's context is shared by every middleware; the transaction type is the handler's
  context: LambdaContextLike & { idem?: IdempotencyContext<any> };
  response: unknown;
  error: unknown;
}

/**
 * The context a Middy handler receives: Lambda's context with idem's at `context.idem`
 * (`undefined` when the request is unprotected). Type the handler's `context` with it: a bare
 * `{ idem?: … }` shares no property with aws-lambda's `Context`, and `middy()` rejects it.
 */
export type IdempotentLambdaContext<Tx = unknown> = LambdaContextLike & { idem?: IdempotencyContext<Tx> };

/** A Middy middleware object (`before` / `after` / `onError`). */
export interface MiddyIdempotency {
  before(request: MiddyRequestLike): Promise<unknown>;
  after(request: MiddyRequestLike): Promise<void>;
  onError(request: MiddyRequestLike): Promise<void>;
}

/**
 * A Middy middleware: `middy(handler).use(idempotency(options))`. Use it first, before body
 * parsers (or after them: a parsed object body is fingerprinted as JSON). The context is at
 * `context.idem` in the handler. A replay or one of idem's problems returns early (the
 * handler does not run); the handler's response is recorded in `after`; an error releases
 * the lease in `onError` and answers the 500 problem (protocol.md H10).
 *
 * @throws {InvalidOptionError} at creation for bad options
 */
export function idempotency<Tx = unknown>(options: LambdaIdempotencyOptions<Tx>): MiddyIdempotency {
  const coreFor = cores(options);
  const keyHeader = resolveKeyHeader(options);
  waitLimits(options as LambdaIdempotencyOptions<unknown>, undefined); // validates the margin at start-up
  const pending = new WeakMap<object, { prepared: Extract<Prepared<Tx>, { kind: 'execute' }>; v2: boolean }>();
  return {
    async before(request) {
      const event = request.event;
      if (!isHttpEvent(event)) return undefined;
      const core = coreFor(request.context);
      const input = eventRequest(parsedBodyAsJson(event), keyHeader);
      if (!core.protects(input.method)) return undefined;
      const prepared = await core.prepare(input, waitLimits(options as LambdaIdempotencyOptions<unknown>, request.context));
      if (prepared.kind === 'pass') return undefined;
      if (prepared.kind === 'respond') return responseResult(prepared.response, isV2(event));
      pending.set(request, { prepared, v2: isV2(event) });
      request.context.idem = prepared.context;
      return undefined;
    },
    async after(request) {
      const state = pending.get(request);
      if (!state) return;
      pending.delete(request);
      let response: Response;
      try {
        response = resultResponse(request.response, state.v2);
      } catch (error) {
        request.response = await responseResult(await state.prepared.fail(error), state.v2);
        return;
      }
      request.response = await responseResult(await state.prepared.complete(response), state.v2);
    },
    async onError(request) {
      const state = pending.get(request);
      if (!state) return;
      pending.delete(request);
      request.response = await responseResult(await state.prepared.fail(request.error), state.v2);
    },
  };
}

/** An event whose body a parser already turned into an object: fingerprint it as JSON. */
function parsedBodyAsJson(event: LambdaHttpEvent): LambdaHttpEvent {
  const body: unknown = event.body;
  if (body === undefined || body === null || typeof body === 'string') return event;
  const copy = { ...event, body: JSON.stringify(body), isBase64Encoded: false } as LambdaHttpEvent;
  copy.headers = { ...withoutContentType(copy.headers), 'content-type': 'application/json' };
  if (!isV2(copy) && copy.multiValueHeaders) copy.multiValueHeaders = { ...withoutContentType(copy.multiValueHeaders), 'content-type': ['application/json'] };
  return copy;
}

function withoutContentType<T>(headers: Record<string, T> | null | undefined): Record<string, T> {
  return Object.fromEntries(Object.entries(headers ?? {}).filter(([name]) => name.toLowerCase() !== 'content-type'));
}

export { eventRequest, isHttpEvent, isV2, resultResponse, responseResult } from './events.js';
export type * from './events.js';
export { HttpIdempotency, type IdempotencyOptions } from '../http/idempotency.js';
export type { IdempotencyContext } from '../http/context.js';
export { batchIdempotency, type BatchHandler, type BatchOptions, dynamoDbBatch, kinesisBatch, type RecordHandler, sqsBatch } from './batch.js';
export type * from './batch-events.js';
export { type DurableContextLike, type DurableIdempotencyOptions, type DurableIdempotentHandler, withDurableIdempotency } from './durable.js';
export { InvalidEventError } from './batch-events.js';
export type { MessageContext } from '../consumer/context.js';
export type { Disposition } from '../consumer/types.js';
