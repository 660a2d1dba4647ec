/**
 * Koa 3 middleware: a thin layer over the web-standard core. Mount it before your body
 * parser: it reads the raw body once (to fingerprint it, protocol.md K2) and puts an identical
 * stream back on `ctx.req`, so `@koa/bodyparser` and the like parse it as usual.
 *
 * @example
 * ```ts
 * import Koa from 'koa';
 * import { bodyParser } from '@koa/bodyparser';
 * import { idempotency } from 'idem/koa';
 * const app = new Koa();
 * app.use(idempotency<Queryable>({ store, required: true }));
 * app.use(bodyParser());
 * app.use(async (ctx) => {
 *   const charge = await ctx.state.idem!.phase('charge_created', (tx) => insertCharge(tx, ctx.request.body));
 *   ctx.status = 201;
 *   ctx.body = charge;
 * });
 * ```
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';
import type { IdempotencyContext } from '../http/context.js';
import { HttpIdempotency, type IdempotencyOptions } from '../http/idempotency.js';
import { bodyResponse } from '../http/response.js';
import { isParsedObject, parsedBytes, readRequest } from '../http/node/body.js';
import { keyHeaderLines, toHeaders } from '../http/node/headers.js';
import { holdWrites, restoreMethods, saveMethods } from '../http/node/hold.js';
import { UnsupportedResponseError } from '../core/errors.js';

/** The slice of a Koa context used here (Koa 2 and 3). */
export interface KoaContextLike {
  method: string;
  originalUrl: string;
  req: IncomingMessage;
  res: ServerResponse;
  request: { req: IncomingMessage; body?: unknown; rawBody?: unknown };
  response: { headers: Record<string, string | string[] | number | undefined>; _explicitNullBody?: boolean };
  state: Record<string, unknown>;
  status: number;
  message: string;
  body: unknown;
  respond?: boolean;
  set(field: string, value: string | string[]): void;
  remove(field: string): void;
}

/** Koa's `next`. */
export type KoaNext = () => Promise<unknown>;

/** What `ctx.state` holds once the middleware ran: `idem`, `undefined` when the request is unprotected. */
export interface IdempotencyState<Tx = unknown> {
  idem?: IdempotencyContext<Tx> | undefined;
}

/** The middleware, with its core for direct use. */
export interface KoaIdempotency<Tx = unknown> {
  (ctx: KoaContextLike, next: KoaNext): Promise<void>;
  /** The core, for direct use. */
  core: HttpIdempotency<Tx>;
}

/**
 * Creates the middleware. The context is at `ctx.state.idem`. What the downstream
 * middleware leaves in `ctx.status` / `ctx.body` / the response headers is recorded before
 * it is sent (a stream body is read whole first), so every retry gets the same bytes.
 * An error thrown with `ctx.throw(4xx)` (an exposed HTTP error) counts as the response Koa
 * would send for it; any other error releases the lease and answers a 500 problem
 * (protocol.md H10), or is stored with `onThrow: 'store'`.
 *
 * @throws {InvalidOptionError} at creation for bad options
 */
export function idempotency<Tx = unknown>(options: IdempotencyOptions<Tx>): KoaIdempotency<Tx> {
  const core = new HttpIdempotency<Tx>(options);

  const middleware = async function idempotencyMiddleware(ctx: KoaContextLike, next: KoaNext): Promise<void> {
    if (!core.protects(ctx.method)) return void (await next());
    const headers = toHeaders(ctx.req.headers);
    const parsed = ctx.request.body;
    let body: Uint8Array | null;
    if (parsed !== undefined) {
      // A body parser ran first: use its raw text, else the parsed value as JSON (as idem/express does).
      body = koaBodyBytes(parsed, ctx.request.rawBody);
      if (typeof ctx.request.rawBody !== 'string' && isParsedObject(parsed)) {
        headers.set('content-type', 'application/json');
      }
    } else {
      body = await readBody(ctx);
    }
    const prepared = await core.prepare({
      method: ctx.method,
      url: ctx.originalUrl,
      headers,
      body,
      keyHeaderLines: keyHeaderLines(ctx.req, core.keyHeaderField),
    });
    if (prepared.kind === 'pass') return void (await next());
    if (prepared.kind === 'respond') return writeResponse(ctx, prepared.response);
    ctx.state.idem = prepared.context;
    let outcome: Response;
    // Koa writes the response after every middleware returned: a write to ctx.res before that
    // is the route bypassing Koa. Hold it, so nothing unrecorded reaches the client (protocol.md H23).
    const restore = holdRaw(ctx.res);
    try {
      await next();
    } catch (thrown) {
      restore();
      outcome = exposedHttpError(thrown) ? await prepared.complete(httpErrorResponse(thrown)) : await prepared.fail(thrown);
      return writeResponse(ctx, outcome);
    }
    const wroteRaw = restore();
    if (ctx.respond === false || wroteRaw || ctx.res.headersSent) {
      // The route wrote to ctx.res itself: refused, as reply.hijack() is on Fastify. What it
      // wrote was held and is dropped; the client gets the 500 problem, the key is released.
      ctx.respond = true;
      const refused = new UnsupportedResponseError(
        'idem/koa: the route bypassed Koa (ctx.respond = false, or a write to ctx.res): idem could not record the response. Answer through ctx.status and ctx.body (strings, buffers, objects, streams).',
      );
      return writeResponse(ctx, await prepared.fail(refused));
    }
    try {
      outcome = await prepared.complete(await readResponse(ctx));
    } catch (thrown) {
      outcome = await prepared.fail(thrown); // a stream body that failed while being read
    }
    await writeResponse(ctx, outcome);
  } as KoaIdempotency<Tx>;
  middleware.core = core;
  return middleware;
}

/**
 * Holds `res` while the downstream middleware runs: its head and body writes are kept off the
 * socket (and dropped). @returns `restore`, which puts the original methods back and says
 * whether the route wrote to `res` (an `end`, or body bytes)
 */
function holdRaw(res: ServerResponse): () => boolean {
  saveMethods(res);
  const held = holdWrites(res);
  let ended = false;
  res.end = function end(...args: unknown[]) {
    ended = true;
    const callback = args.find((arg) => typeof arg === 'function');
    if (callback) queueMicrotask(() => (callback as () => void)());
    return res;
  } as ServerResponse['end'];
  return () => {
    restoreMethods(res);
    return ended || held.body().length > 0;
  };
}

/** Reads `ctx.req` whole, then puts an identical stream back on `ctx.req` for body parsers. */
async function readBody(ctx: KoaContextLike): Promise<Uint8Array | null> {
  const req = ctx.req;
  const raw = await readRequest(req);
  if (!raw) return null; // consumed by something that kept nothing
  const replay = Readable.from(raw.length > 0 ? [raw] : [], { objectMode: false }) as unknown as IncomingMessage;
  for (const name of [
    'headers',
    'rawHeaders',
    'trailers',
    'method',
    'url',
    'httpVersion',
    'httpVersionMajor',
    'httpVersionMinor',
    'socket',
    'complete',
  ] as const) {
    Object.defineProperty(replay, name, { value: req[name], writable: true, configurable: true, enumerable: true });
  }
  Object.defineProperty(replay, 'headersDistinct', { get: () => req.headersDistinct, configurable: true });
  Object.defineProperty(replay, 'connection', { get: () => req.socket, configurable: true });
  ctx.req = replay;
  ctx.request.req = replay;
  return raw.length > 0 ? raw : null;
}

function koaBodyBytes(parsed: unknown, rawBody: unknown): Uint8Array | null {
  if (typeof rawBody === 'string') return rawBody.length > 0 ? Buffer.from(rawBody) : null;
  return parsedBytes(parsed);
}

/** What Koa would send for the current `ctx.status` / `ctx.body`, as a web Response. */
async function readResponse(ctx: KoaContextLike): Promise<Response> {
  const headers = toHeaders(ctx.response.headers);
  const status = ctx.status;
  const value = ctx.body;
  let bytes: Uint8Array;
  if (value === null || value === undefined) {
    if (ctx.response._explicitNullBody) bytes = new Uint8Array();
    else {
      // Koa answers a bodiless status with its message as text.
      bytes = Buffer.from(ctx.message || String(status));
      headers.set('content-type', 'text/plain; charset=utf-8');
    }
  } else if (typeof value === 'string') bytes = Buffer.from(value);
  // Koa sends a Buffer as bytes, but any other Uint8Array as JSON, like a plain object (protocol.md H23).
  else if (Buffer.isBuffer(value)) bytes = value;
  else if (value instanceof ReadableStream || value instanceof Blob || value instanceof Response) {
    bytes = new Uint8Array(await new Response(value instanceof Response ? value.body : value).arrayBuffer());
  } else if (typeof (value as { pipe?: unknown }).pipe === 'function') bytes = await readStream(value as AsyncIterable<unknown>);
  else bytes = Buffer.from(JSON.stringify(value));
  headers.delete('content-length');
  headers.delete('transfer-encoding');
  return bodyResponse(status, bytes, { headers });
}

/**
 * A stream body read whole, as Koa would pipe it to the socket: a chunk is bytes, or a string
 * written as UTF-8 (`Readable.from(['a', 'b'])` is a stream of strings).
 */
async function readStream(stream: AsyncIterable<unknown>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks);
}

/** Writes a web Response into Koa's ctx, replacing the status, every header and the body. */
async function writeResponse(ctx: KoaContextLike, response: Response): Promise<void> {
  for (const name of Object.keys(ctx.response.headers)) ctx.remove(name);
  ctx.status = response.status;
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie' && name !== 'content-length') ctx.set(name, value);
  });
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) ctx.set('set-cookie', cookies);
  // Always bytes: Koa turns a null body into a 204.
  ctx.body = Buffer.from(await response.arrayBuffer());
}

interface HttpErrorLike {
  status: number;
  expose: boolean;
  message: string;
  headers?: Record<string, string>;
}

/** `ctx.throw(400)` and http-errors' 4xx errors: exposed, a deliberate answer rather than a crash. */
function exposedHttpError(thrown: unknown): thrown is HttpErrorLike {
  const e = thrown as Partial<HttpErrorLike> | null;
  return typeof e === 'object' && e !== null && e.expose === true && typeof e.status === 'number' && e.status >= 400 && e.status < 500;
}

/** The response Koa's default error handler sends for an exposed HTTP error. */
function httpErrorResponse(error: HttpErrorLike): Response {
  const headers = new Headers(error.headers);
  headers.set('content-type', 'text/plain; charset=utf-8');
  return new Response(error.message, { status: error.status, headers });
}

export { HttpIdempotency, type IdempotencyOptions } from '../http/idempotency.js';
export type { IdempotencyContext } from '../http/context.js';
