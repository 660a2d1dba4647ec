/**
 * The NestJS interceptor: runs idem around a route marked with `@Idempotent()`, on the
 * Express and on the Fastify platform alike, by holding the raw Node response (both
 * platforms end there) until its outcome is recorded.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HttpException, Inject, StreamableFile, Injectable, type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { catchError, of, tap, throwError, type Observable } from 'rxjs';
import type { EngineOptions } from '../engine/engine.js';
import { HttpIdempotency, type IdempotencyOptions } from '../http/idempotency.js';
import { keyHeaderLines, toHeaders } from '../http/node/headers.js';
import { holdResponse, sendResponse } from './capture.js';

/** Injection token of the module's {@link HttpIdempotency} core (its `engine.store` is the store). */
export const IDEMPOTENCY = Symbol.for('idem.nestjs.core');
/** Injection token of the options given to `forRoot` / returned by `forRootAsync`'s factory. */
export const IDEMPOTENCY_OPTIONS = Symbol.for('idem.nestjs.options');
/** Injection token of the store (e.g. a `PostgresStore`), for a Completer, inspection or tests. */
export const IDEMPOTENCY_STORE = Symbol.for('idem.nestjs.store');
/** Metadata key `@Idempotent()` sets on a handler or controller. */
export const IDEMPOTENT_METADATA = 'idem:idempotent';

/** Per-route HTTP options of `@Idempotent({...})`; engine options (lease, retention) come from the module. */
export type RouteIdempotencyOptions = Omit<IdempotencyOptions, 'store' | 'engine' | keyof EngineOptions>;

/** Where the context is kept on the platform's request object (`req.idem`). */
export const CONTEXT_PROPERTY = 'idem';
const SEEN = Symbol('idem.nestjs.seen');

/** The slice of the platform request used here: Express's `req`, or Fastify's `request` (with `raw`). */
interface PlatformRequest {
  raw?: IncomingMessage;
  body?: unknown;
  rawBody?: Buffer;
  originalUrl?: string;
  [CONTEXT_PROPERTY]?: unknown;
  [SEEN]?: true;
}

/**
 * The interceptor `@Idempotent()` applies. It claims the key before the handler runs, answers
 * replays and idem's problems without running it, and records what the route (or an exception
 * filter) writes before it is sent. A thrown `HttpException` under 500 is a deliberate
 * response; any other error still goes to the exception filters, and its response is replaced
 * by idem's 500 problem once the lease is released (or stored, with `onThrow: 'store'`).
 */
export class IdempotencyInterceptor implements NestInterceptor {
  private readonly cores = new WeakMap<object, HttpIdempotency>();

  constructor(
    private readonly root: HttpIdempotency,
    private readonly options: IdempotencyOptions,
    private readonly reflector: Reflector,
  ) {}

  async intercept(context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    if (context.getType() !== 'http') return next.handle();
    const req = context.switchToHttp().getRequest<PlatformRequest & IncomingMessage>();
    if (req[SEEN]) return next.handle(); // @Idempotent() on both the controller and the handler
    req[SEEN] = true;
    const raw: IncomingMessage = req.raw ?? req;
    const res = context.switchToHttp().getResponse<{ raw?: ServerResponse } & ServerResponse>();
    const rawRes: ServerResponse = res.raw ?? res;
    const routeOptions = this.reflector.getAllAndOverride<RouteIdempotencyOptions | undefined>(IDEMPOTENT_METADATA, [context.getHandler(), context.getClass()]);
    const core = this.coreFor(routeOptions);
    const method = raw.method ?? 'GET';
    if (!core.protects(method)) return next.handle();
    const headers = toHeaders(raw.headers);
    const body = await bodyBytes(req, raw, headers); // fingerprinted before the handler runs (protocol.md H7)
    const prepared = await core.prepare({
      method,
      url: req.originalUrl ?? raw.url ?? '/',
      headers,
      body,
      keyHeaderLines: keyHeaderLines(raw, core.keyHeaderField),
    });
    if (prepared.kind === 'pass') return next.handle();
    if (prepared.kind === 'respond') {
      // The handler does not run. A handler with @Res() leaves the response to us; otherwise
      // the platform writes one, which is replaced by this response.
      if (handlesResponse(context.getClass(), context.getHandler().name)) await sendResponse(rawRes, prepared.response);
      else holdResponse(rawRes, async () => prepared.response);
      return of(undefined);
    }
    req[CONTEXT_PROPERTY] = prepared.context;
    let thrown: { error: unknown } | undefined;
    // Record what is written before it is sent (protocol.md K5); a crash releases instead (protocol.md H10).
    holdResponse(
      rawRes,
      (written) => (thrown ? prepared.fail(thrown.error) : prepared.complete(written)),
      (error) => prepared.fail(error),
    );
    return next.handle().pipe(
      // A stream the platform pipes out (StreamableFile) can fail after the handler returned:
      // Nest's platforms then write their own error (Express: 400 with the message, Fastify:
      // its error JSON) over the bytes held so far. That is a crash, not an answer (protocol.md H23).
      tap((value: unknown) => {
        const stream = value instanceof StreamableFile ? value.getStream() : undefined;
        stream?.once('error', (error: unknown) => {
          thrown ??= { error };
        });
      }),
      catchError((error: unknown) => {
        if (!(error instanceof HttpException && error.getStatus() < 500)) thrown = { error };
        return throwError(() => error);
      }),
    );
  }

  /** The module's core, or one with this route's HTTP options over the same engine. */
  private coreFor(routeOptions: RouteIdempotencyOptions | undefined): HttpIdempotency {
    if (!routeOptions || Object.keys(routeOptions).length === 0) return this.root;
    let core = this.cores.get(routeOptions);
    if (!core) {
      core = new HttpIdempotency({ ...this.options, ...routeOptions, engine: this.root.engine });
      this.cores.set(routeOptions, core);
    }
    return core;
  }
}
Injectable()(IdempotencyInterceptor);
// Explicit tokens: no emitDecoratorMetadata (and no design:paramtypes) needed.
Inject(IDEMPOTENCY)(IdempotencyInterceptor, undefined, 0);
Inject(IDEMPOTENCY_OPTIONS)(IdempotencyInterceptor, undefined, 1);
Inject(Reflector)(IdempotencyInterceptor, undefined, 2);

/**
 * The raw body: `rawBody` when the app was created with `{ rawBody: true }` (recommended),
 * else the parsed body (canonical JSON, the same on every retry since the same parser runs),
 * else read from the stream when nothing consumed it (Express, a type with no parser), left in
 * `req.body` as a Buffer.
 */
async function bodyBytes(req: PlatformRequest, raw: IncomingMessage, headers: Headers): Promise<Uint8Array | null> {
  if (req.rawBody instanceof Uint8Array) return req.rawBody.length > 0 ? req.rawBody : null;
  const parsed = req.body;
  if (parsed === undefined || parsed === null) {
    if (req.raw !== undefined || raw.readableEnded) return null; // Fastify parsed it (nothing), or consumed
    const chunks: Buffer[] = [];
    for await (const chunk of raw) chunks.push(chunk as Buffer);
    const bytes = Buffer.concat(chunks);
    req.body = bytes;
    return bytes.length > 0 ? bytes : null;
  }
  if (parsed instanceof Uint8Array) return parsed.length > 0 ? parsed : null;
  if (typeof parsed === 'string') return parsed.length > 0 ? Buffer.from(parsed) : null;
  headers.set('content-type', 'application/json');
  return Buffer.from(JSON.stringify(parsed));
}

type Reflecting = { getMetadata?(key: string, target: object, property: string): unknown };
/** Nest's own metadata keys and `RouteParamtypes.RESPONSE` / `NEXT` (stable since Nest 6). */
const ROUTE_ARGS_METADATA = '__routeArguments__';
const RESPONSE_PASSTHROUGH_METADATA = '__responsePassthrough__';
const RESPONSE_PARAM = 1;
const NEXT_PARAM = 2;

/**
 * True when the handler takes `@Res()` / `@Next()` without `passthrough`: Nest then writes
 * nothing itself (as in Nest's RouterExecutionContext.isResponseHandled).
 */
function handlesResponse(controller: object, method: string): boolean {
  const reflect = Reflect as unknown as Reflecting;
  const params = (reflect.getMetadata?.(ROUTE_ARGS_METADATA, controller, method) ?? {}) as Record<string, unknown>;
  const takesResponse = Object.keys(params).some((key) => [RESPONSE_PARAM, NEXT_PARAM].includes(Number(key.split(':')[0])));
  return takesResponse && !reflect.getMetadata?.(RESPONSE_PASSTHROUGH_METADATA, controller, method);
}
