/**
 * Fastify 5 plugin: a thin layer over the web-standard core, made with `fastify-plugin` so it
 * protects the routes of the scope it is registered in (and that scope's children), and no
 * others.
 *
 * @example
 * ```ts
 * import { idempotency } from 'idem/fastify';
 * await app.register(idempotency, { store, required: true });
 * app.post('/v1/charges', { config: { idempotency: true } }, async (request, reply) => {
 *   const charge = await request.idem!.phase('charge_created', (tx) => insertCharge(tx, request.body));
 *   return reply.code(201).send(charge);
 * });
 * ```
 */
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { UnsupportedResponseError } from '../core/errors.js';
import type { IdempotencyContext } from '../http/context.js';
import { HttpIdempotency, type IdempotencyOptions, type Prepared } from '../http/idempotency.js';
import { bodyResponse } from '../http/response.js';
import { keyHeaderLines, toHeaders } from '../http/node/headers.js';
import type { EngineOptions } from '../engine/engine.js';

/**
 * Register the store's transaction type once, so `request.idem` is typed in every route:
 * `declare module 'idem/fastify' { interface IdempotencyRegister { tx: Queryable } }`.
 */
// biome-ignore lint/suspicious/noEmptyInterface: users extend it by declaration merging
export interface IdempotencyRegister {}
/** The transaction type registered in {@link IdempotencyRegister}, else `unknown`. */
export type RegisteredTx = IdempotencyRegister extends { tx: infer T } ? T : unknown;

/** Per-route HTTP options (`config: { idempotency: { required: true } }`); engine options come from the plugin. */
export type RouteIdempotencyOptions = Omit<IdempotencyOptions<RegisteredTx>, 'store' | 'engine' | keyof EngineOptions>;

/** Plugin options: the core's options, plus which routes of the scope are protected. */
export interface FastifyIdempotencyOptions<Tx = RegisteredTx> extends IdempotencyOptions<Tx> {
  /**
   * Protect every route of the scope (and its child scopes) registered after the plugin; a
   * route opts out with `config: { idempotency: false }`. Without it only routes with
   * `config: { idempotency: true | {...} }` are protected.
   * @default false
   */
  all?: boolean;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** This request's idempotency context; `undefined` when the route or request is unprotected. */
    idem?: IdempotencyContext<RegisteredTx> | undefined;
  }
  interface FastifyContextConfig {
    /** `true` protects the route with the plugin's options, an object overrides HTTP options, `false` opts out. */
    idempotency?: boolean | RouteIdempotencyOptions;
  }
}

const RAW = Symbol('idem.rawBody');
const PREPARED = Symbol('idem.prepared');
const THROWN = Symbol('idem.thrown');
type Slots = { [RAW]?: Uint8Array | null; [PREPARED]?: Extract<Prepared<RegisteredTx>, { kind: 'execute' }>; [THROWN]?: unknown };
const slots = (request: FastifyRequest) => request as unknown as Slots;

const plugin: FastifyPluginAsync<FastifyIdempotencyOptions> = async (fastify: FastifyInstance, options) => {
  const { all = false, ...httpOptions } = options;
  const base = new HttpIdempotency<RegisteredTx>(httpOptions);
  if (!fastify.hasRequestDecorator('idem')) fastify.decorateRequest('idem', undefined);
  fastify.addHook('onRoute', (route) => {
    const setting = route.config?.idempotency ?? all;
    if (setting === false) return;
    const core = setting === true ? base : new HttpIdempotency<RegisteredTx>({ ...httpOptions, ...setting, engine: base.engine });
    protect(route, core);
  });
};

/** Adds the route-level hooks that run idem on one route. */
function protect(route: RouteOptions, core: HttpIdempotency<RegisteredTx>): void {
  // preParsing: the raw bytes, before any content-type parser runs (protocol.md K2, H7).
  const preParsing = async (request: FastifyRequest, _reply: FastifyReply, payload: NodeJS.ReadableStream) => {
    if (!core.protects(request.method)) return payload;
    const raw = await readAll(payload, request.routeOptions.bodyLimit);
    slots(request)[RAW] = raw.length > 0 ? raw : null;
    const refed = Readable.from(raw.length > 0 ? [raw] : []) as Readable & { receivedEncodedLength?: number };
    refed.receivedEncodedLength = raw.length; // what Fastify checks against Content-Length
    return refed;
  };
  // preValidation: the body parsed (a malformed body got Fastify's 400 and claimed nothing); claim (protocol.md K3).
  const preValidation = async (request: FastifyRequest, reply: FastifyReply) => {
    if (!core.protects(request.method)) return;
    const prepared = await core.prepare({
      method: request.method,
      url: request.url,
      headers: toHeaders(request.headers),
      body: slots(request)[RAW] ?? null,
      keyHeaderLines: keyHeaderLines(request.raw, core.keyHeaderField),
    });
    if (prepared.kind === 'pass') return;
    if (prepared.kind === 'respond') return writeOut(reply, prepared.response).then((body) => reply.send(body ?? undefined));
    slots(request)[PREPARED] = prepared;
    request.idem = prepared.context;
    reply.hijack = () => {
      throw new UnsupportedResponseError(
        'idem/fastify: reply.hijack() cannot be used on an idempotent route: idem could not record the response. Send it with reply.send (objects, strings, buffers, streams).',
      );
    };
  };
  // onError: remember a thrown error; the error handler's reply then reaches onSend.
  const onError = async (request: FastifyRequest, _reply: FastifyReply, error: unknown) => {
    if (slots(request)[PREPARED]) slots(request)[THROWN] = error;
  };
  // onSend: record the response before it is sent (protocol.md K5), or release on a crash (protocol.md H10).
  const onSend = async (request: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    const prepared = slots(request)[PREPARED];
    if (!prepared) return payload;
    slots(request)[PREPARED] = undefined; // once: an error in this hook must not come back here
    // An async handler that calls reply.send() without returning it resolves while this hook
    // still records: Fastify then sends again (reply.sent is still false) with no payload, and
    // that empty send would reach the client first. Plain Fastify had finished the first send
    // by then and ignores the second: so does this (protocol.md H23).
    const ownSend = Object.getOwnPropertyDescriptor(reply, 'send');
    reply.send = () => reply;
    try {
      const thrown = slots(request)[THROWN];
      // A thrown error answered with a 4xx (validation, an HttpError) is a deliberate response.
      const crashed = THROWN in slots(request) && reply.statusCode >= 500;
      let out: Response;
      if (crashed) out = await prepared.fail(thrown);
      else {
        let response: Response | undefined;
        try {
          response = await toResponse(reply, payload);
        } catch (error) {
          // The body stream failed while being read: never stored, idem's 500 (protocol.md H10, H23).
          out = await prepared.fail(error);
        }
        if (response) out = await prepared.complete(response);
      }
      return await writeOut(reply, out!);
    } finally {
      if (ownSend) Object.defineProperty(reply, 'send', ownSend);
      else delete (reply as { send?: unknown }).send; // the prototype's send again
    }
  };
  route.preParsing = append(route.preParsing, preParsing);
  route.preValidation = append(route.preValidation, preValidation);
  route.onError = append(route.onError, onError);
  route.onSend = append(route.onSend, onSend);
}

function append<T>(hooks: T | T[] | undefined, hook: unknown): T[] {
  return [...(hooks === undefined ? [] : Array.isArray(hooks) ? hooks : [hooks]), hook as T];
}

/**
 * Reads a stream whole, failing with Fastify's 413 past `limit` bytes (then, as Fastify's own
 * parser does, it stops listening and leaves the connection to Fastify's error reply).
 */
function readAll(stream: NodeJS.ReadableStream, limit: number | undefined): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let length = 0;
    const stop = () => {
      stream.removeListener('data', onData);
      stream.removeListener('end', onEnd);
      stream.removeListener('error', onEnd);
    };
    const onData = (chunk: Buffer | string) => {
      const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      length += buffer.length;
      if (limit !== undefined && length > limit) {
        stop();
        reject(Object.assign(new Error('Request body is too large'), { statusCode: 413, code: 'FST_ERR_CTP_BODY_TOO_LARGE' }));
        return;
      }
      chunks.push(buffer);
    };
    const onEnd = (error?: unknown) => {
      stop();
      if (error) reject(error);
      else resolve(Buffer.concat(chunks));
    };
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('error', onEnd);
  });
}

/** What the route sent (serialized payload, Buffer, stream or web Response) as a web Response. */
async function toResponse(reply: FastifyReply, payload: unknown): Promise<Response> {
  const headers = new Headers();
  for (const [name, value] of Object.entries(reply.getHeaders())) {
    if (Array.isArray(value)) for (const v of value) headers.append(name, v);
    else if (value !== undefined) headers.set(name, String(value));
  }
  let status = reply.statusCode;
  let body: Uint8Array;
  if (payload instanceof Response) {
    status = payload.status;
    payload.headers.forEach((value, name) => {
      if (name !== 'set-cookie') headers.set(name, value);
    });
    for (const line of payload.headers.getSetCookie()) headers.append('set-cookie', line);
    body = new Uint8Array(await payload.arrayBuffer());
  } else if (payload === undefined || payload === null) {
    body = new Uint8Array();
  } else if (typeof payload === 'string' || payload instanceof Uint8Array) {
    body = typeof payload === 'string' ? Buffer.from(payload) : payload;
  } else if (typeof (payload as { getReader?: unknown }).getReader === 'function') {
    // A stream is read whole and recorded before anything is sent (an endless stream never ends).
    body = new Uint8Array(await new Response(payload as ReadableStream).arrayBuffer());
  } else if (typeof (payload as { pipe?: unknown }).pipe === 'function') {
    body = await readAll(payload as NodeJS.ReadableStream, undefined);
  } else {
    throw new UnsupportedResponseError(`idem/fastify: cannot record a reply payload of type ${typeof payload}`);
  }
  headers.delete('content-length');
  return bodyResponse(status, body, { headers });
}

/** Puts a web Response's status and headers on the reply (replacing all others); returns its body. */
async function writeOut(reply: FastifyReply, response: Response): Promise<Buffer | null> {
  for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
  for (const name of reply.raw.getHeaderNames()) reply.raw.removeHeader(name);
  reply.code(response.status);
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie' && name !== 'content-length') reply.header(name, value);
  });
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) reply.header('set-cookie', cookies);
  return response.body ? Buffer.from(await response.arrayBuffer()) : null;
}

/**
 * The plugin. Register it with the core's options (`store` or `engine`, ...), plus `all`;
 * then protect routes with `config: { idempotency: true }` (or an object of HTTP options
 * for that route), or every route of the scope with `all: true`. Only routes declared after
 * the registration (in the same scope or its children) are seen.
 *
 * The raw body is captured in a `preParsing` hook and fed again to Fastify's parser, so
 * `request.body` still works; the claim is made in `preValidation`; the response (objects,
 * strings, buffers, streams, web Responses) is recorded in `onSend` before it is sent. A
 * thrown error answered with a 5xx releases the lease and answers idem's 500 problem (or
 * is stored, with `onThrow: 'store'`); `reply.hijack()` throws {@link UnsupportedResponseError}.
 *
 * @throws {InvalidOptionError} at registration for bad options
 */
export const idempotency = fp(plugin, { fastify: '5.x', name: 'idem' });
export default idempotency;

export { HttpIdempotency, type IdempotencyOptions } from '../http/idempotency.js';
export type { IdempotencyContext } from '../http/context.js';
