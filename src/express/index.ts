/**
 * Express middleware: a thin layer over the web-standard core. Mount it after your body
 * parser (or before any: it then reads the raw body itself and leaves it in `req.body` as a
 * Buffer), and mount `onError` after your routes so a thrown error releases the lease.
 *
 * @example
 * ```ts
 * import { idempotency } from 'idem/express';
 * const idem = idempotency<Queryable>({ store, required: true });
 * app.post('/v1/orders', express.json(), idem, async (req, res) => {
 *   const order = await idem.context(res)!.phase('order_created', (tx) => insertOrder(tx, req.body));
 *   res.status(201).json(order);
 * });
 * app.use(idem.onError);
 * ```
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { IdempotencyContext } from '../http/context.js';
import { HttpIdempotency, type IdempotencyOptions, type Prepared } from '../http/idempotency.js';
import { isParsedObject, parsedBytes, readRequest } from '../http/node/body.js';
import { keyHeaderLines, toHeaders } from '../http/node/headers.js';
import { holdWrites, restoreMethods, saveMethods } from '../http/node/hold.js';
import { isNullBodyStatus, replayHeaders } from '../http/response.js';
import type { StoredResponse } from '../store/types.js';

/**
 * The request in the middleware's signature. Express infers a route's body and locals types
 * from every handler in its chain: `body` is `any` here, Express's own default, so the app's
 * `req.body` stays `any` (a `body?: unknown` turned it into `unknown`) or the type the route
 * declares; the response declares no `locals`, so typed locals keep their shape.
 */
// biome-ignore lint/suspicious/noExplicitAny: `any` is Express's default body type; `unknown` would become the route's
export type ExpressRequestLike = IncomingMessage & { body?: any };
/** The response in the middleware's signature (see {@link ExpressRequestLike}). */
export type ExpressResponseLike = ServerResponse;
/** The slice of an Express request used here. */
interface ReqLike extends IncomingMessage {
  body?: unknown;
  originalUrl?: string;
}
/** The slice of an Express response used here. */
interface ResLike extends ServerResponse {
  locals: Record<string, unknown>;
}
type Next = (error?: unknown) => void;

/** The middleware, plus an error middleware to mount after the routes. */
export interface ExpressIdempotency<Tx = unknown> {
  (req: ExpressRequestLike, res: ExpressResponseLike, next: Next): Promise<void>;
  /** Error middleware: a thrown error in a protected route releases the lease and answers a 500 problem. */
  onError: (error: unknown, req: ExpressRequestLike, res: ExpressResponseLike, next: Next) => Promise<void>;
  /** The core, for direct use. */
  core: HttpIdempotency<Tx>;
  /** This request's context (typed), `undefined` when the request is unprotected. */
  context(res: { locals: object }): IdempotencyContext<Tx> | undefined;
}

const PREPARED = Symbol('idem.prepared');
/** Set once the route ended its response: settles when that response is recorded and sent. */
const SENDING = Symbol('idem.sending');

/**
 * Creates the middleware. The context is at `res.locals.idem` (and `req.idem`). The
 * response is buffered and recorded before it is sent, so a client that received it gets
 * the same bytes from every retry.
 *
 * @throws {InvalidOptionError} at creation for bad options
 */
export function idempotency<Tx = unknown>(options: IdempotencyOptions<Tx>): ExpressIdempotency<Tx> {
  const core = new HttpIdempotency<Tx>(options);

  const middleware = async function idempotencyMiddleware(request: ExpressRequestLike, response: ExpressResponseLike, next: Next): Promise<void> {
    const req = request as ReqLike;
    const res = response as ResLike;
    try {
      if (!core.protects(req.method ?? 'GET')) return next();
      const parsedObject = isParsedObject(req.body);
      const body = await bodyBytes(req);
      const headers = toHeaders(req.headers);
      if (parsedObject) headers.set('content-type', 'application/json');
      const prepared = await core.prepare({
        method: req.method ?? 'GET',
        url: req.originalUrl ?? req.url ?? '/',
        headers,
        body,
        keyHeaderLines: keyHeaderLines(req, core.keyHeaderField),
      });
      if (prepared.kind === 'pass') return next();
      if (prepared.kind === 'respond') return void (prepared.replayed ? sendReplay(res, prepared.replayed) : await send(res, prepared.response));
      (req as unknown as Record<symbol, unknown>)[PREPARED] = prepared;
      res.locals.idem = prepared.context;
      (req as unknown as { idem: IdempotencyContext<Tx> }).idem = prepared.context;
      capture(req, res, prepared);
      next();
    } catch (error) {
      next(error);
    }
  } as ExpressIdempotency<Tx>;

  middleware.onError = async function idempotencyErrors(error, req, res, next) {
    const sending = (req as unknown as Record<symbol, Promise<void> | undefined>)[SENDING];
    if (sending) {
      // The route ended its response, then failed: that response is the outcome. Let it be
      // recorded and sent first, so later error handlers find it sent and cannot replace it.
      await sending;
      return next(error);
    }
    const prepared = (req as unknown as Record<symbol, Prepared<Tx> | undefined>)[PREPARED];
    // No execution, or the route already ended its response (which is being recorded).
    if (prepared?.kind !== 'execute') return next(error);
    (req as unknown as Record<symbol, unknown>)[PREPARED] = undefined;
    restore(res as ResLike);
    if (res.headersSent) {
      // Too late to answer with a problem; still release, so retries need not wait out the lease.
      await prepared.context.execution.release().catch(() => undefined);
      return next(error);
    }
    await send(res as ResLike, await prepared.fail(error));
  };
  middleware.core = core;
  middleware.context = (res) => (res.locals as Record<string, unknown>).idem as IdempotencyContext<Tx> | undefined;
  return middleware;
}

/** The raw body: from a body parser's result, or read from the stream (and left in `req.body`). */
async function bodyBytes(req: ReqLike): Promise<Uint8Array | null> {
  if (req.body !== undefined && req.body !== null) return parsedBytes(req.body);
  const raw = await readRequest(req);
  if (raw) req.body = raw;
  return raw && raw.length > 0 ? raw : null;
}

/** Buffers what the route writes; at `end`, records it and sends what the core returns. */
function capture<Tx>(req: ReqLike, res: ResLike, prepared: Extract<Prepared<Tx>, { kind: 'execute' }>): void {
  const original = saveMethods(res);
  const held = holdWrites(res as ServerResponse);
  // `pipeline(stream, res)` destroys the response with the stream's error when the stream
  // fails. Nothing was sent yet (it is held): that is the route crashing mid-body, so the key
  // is released and the client gets the 500 problem, never a reset over a key left in
  // progress (protocol.md H10, H23). A destroy without an error, or of a connection already
  // gone, is left to Node.
  (res as ServerResponse).destroy = function destroy(error?: Error) {
    if (!error || res.socket?.destroyed !== false) return original.destroy.call(res, error);
    restore(res);
    (req as unknown as Record<symbol, unknown>)[PREPARED] = undefined;
    (req as unknown as Record<symbol, unknown>)[SENDING] = prepared
      .fail(error)
      .then((out) => send(res, out))
      .then(() => flushed(res))
      .catch(() => void (res.writableEnded || res.destroy()));
    return res;
  } as ServerResponse['destroy'];
  (res as ServerResponse).end = function end(chunk?: unknown, encoding?: unknown) {
    held.push(chunk, encoding);
    restore(res);
    // The response is decided: an error thrown after this point is not this request's outcome.
    (req as unknown as Record<symbol, unknown>)[PREPARED] = undefined;
    const body = held.body();
    const recorded = { status: res.statusCode, headers: res.getHeaders() };
    (req as unknown as Record<symbol, unknown>)[SENDING] = prepared
      .completeHeld({ ...recorded, body: new Uint8Array(body.buffer, body.byteOffset, body.byteLength) })
      .then(
        (out) => (out instanceof Response ? send(res, out) : sendHeld(res, recorded, body, out.headers)),
        (error) => send(res, new Response(String(error), { status: 500 })),
      )
      .then(() => flushed(res))
      // An error handler answered first, the head went out past the capture, or the client
      // went away: never leave the response hanging, never reject unhandled.
      .catch(() => void (res.writableEnded || res.destroy()));
    return res;
  } as ServerResponse['end'];
}

const restore = restoreMethods;

/** Resolves once the response has been handed to the OS, or its connection closed. */
function flushed(res: ResLike): Promise<void> {
  if (res.writableFinished || res.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    res.once('finish', resolve);
    res.once('close', resolve);
  });
}

/** Writes a replayed response out through Node's response, as `send(res, replayResponse(stored))` would, without building the web Response. */
function sendReplay(res: ResLike, stored: StoredResponse): void {
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  res.statusCode = stored.status;
  for (const [name, value] of Object.entries(replayHeaders(stored))) res.setHeader(name, value);
  if (isNullBodyStatus(stored.status)) return void res.end();
  res.setHeader('content-length', stored.body.length);
  res.end(Buffer.from(stored.body.buffer, stored.body.byteOffset, stored.body.byteLength));
}

/**
 * Sends the response the route wrote (held until recorded) as it was recorded, with `headers`
 * added: a status or header the route changed after `end()` (the head is not sent yet, so
 * Node would take it) is put back, so the first answer is the one every replay gives.
 */
function sendHeld(res: ResLike, recorded: { status: number; headers: OutgoingHttpHeaders }, body: Buffer, headers: Array<[string, string]>): void {
  for (const name of res.getHeaderNames()) if (!(name in recorded.headers)) res.removeHeader(name);
  res.statusCode = recorded.status;
  for (const [name, value] of Object.entries(recorded.headers)) if (value !== undefined && res.getHeader(name) !== value) res.setHeader(name, value);
  for (const [name, value] of headers) res.setHeader(name, value);
  res.setHeader('content-length', body.length);
  res.end(body);
}

/** Writes a web Response out through Node's response, replacing any headers set so far. */
async function send(res: ResLike, response: Response): Promise<void> {
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  res.statusCode = response.status;
  const setCookies = response.headers.getSetCookie();
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie') res.setHeader(name, value);
  });
  if (setCookies.length > 0) res.setHeader('set-cookie', setCookies);
  const body = response.body ? Buffer.from(await response.arrayBuffer()) : undefined;
  if (body !== undefined) res.setHeader('content-length', body.length);
  res.end(body);
}

export { HttpIdempotency, type IdempotencyOptions } from '../http/idempotency.js';
export type { IdempotencyContext } from '../http/context.js';
