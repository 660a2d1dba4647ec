/**
 * One small harness per HTTP adapter (web core, Hono, Express), so the adapter contract suite
 * (test/contracts/adapter.ts) states each behaviour once. A test gives a framework-neutral
 * {@link Route}; the harness mounts it behind idem in its framework and sends requests to it.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import type { ContentfulStatusCode, StatusCode } from 'hono/utils/http-status';
import { HTTPException } from 'hono/http-exception';
import express, { type ErrorRequestHandler, type Request as ExpressRequest } from 'express';
import { HttpIdempotency, type IdempotencyOptions } from '../../src/http/idempotency.js';
import type { IdempotencyContext } from '../../src/http/context.js';
import { idempotency as honoIdempotency, type IdempotencyVariables } from '../../src/hono/index.js';
import { idempotency as expressIdempotency } from '../../src/express/index.js';
import type { Queryable } from '../../src/postgres/client.js';

export type Ctx = IdempotencyContext<Queryable> | undefined;

/** The request as a route sees it, whatever the framework. */
export interface RouteRequest {
  method: string;
  /** Path with query, e.g. `/v1/charges?expand=a`. */
  path: string;
  headers: Headers;
  bytes(): Promise<Uint8Array>;
  text(): Promise<string>;
  json<T = unknown>(): Promise<T>;
}

/** A route's answer, written out through the framework's own response API. */
export interface Reply {
  status: number;
  headers?: Record<string, string>;
  /** Set-Cookie lines, one header line each. */
  setCookie?: string[];
  body?: string | Uint8Array | null;
}

/**
 * A route handler stated once for every adapter: the context is `undefined` when the request
 * is unprotected. It returns a {@link Reply}, or a web Response (what `ctx.respond` gives).
 */
export type Route = (req: RouteRequest, ctx: Ctx) => Reply | Response | Promise<Reply | Response>;

/** An app built by a harness: idem in front of one route that answers every method and path. */
export interface AdapterApp {
  /** Sends one request the way this adapter is normally reached (in process or over a socket). */
  send(path: string, init: RequestInit): Promise<Response>;
  /** Serves the app on a real socket (127.0.0.1, port 0) and returns its base URL. */
  serve(): Promise<string>;
}

export interface AdapterHarness {
  name:
    | 'web core'
    | 'hono'
    | 'express'
    | 'fastify'
    | 'nestjs (express)'
    | 'nestjs (fastify)'
    | 'koa'
    | 'next'
    | 'lambda rest v1'
    | 'lambda http v2'
    | 'lambda function url';
  /** True when `send` goes over a real socket (fetch then refuses some header bytes, e.g. 0x01). */
  socket: boolean;
  /** Builds the app; servers it starts are closed by `cleanup`. */
  build(options: IdempotencyOptions<Queryable>, route: Route, cleanup: (fn: () => Promise<void>) => void): AdapterApp;
}

/** Starts a node:http server on an ephemeral port; returns its URL and a closer. */
export async function listen(server: http.Server): Promise<{ url: string; close(): Promise<void> }> {
  // No server-side idle timeout (see harness-next.ts): only the client ends idle connections, so a
  // kept-alive connection is never ended by the server at the moment fetch sends on it.
  server.keepAliveTimeout = 0;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Serves a fetch-style handler with @hono/node-server. */
async function serveFetch(fetchFn: (request: Request) => Response | Promise<Response>, cleanup: (fn: () => Promise<void>) => void): Promise<string> {
  let server!: http.Server;
  const info = await new Promise<AddressInfo>((resolve) => {
    server = serve({ fetch: fetchFn, port: 0, hostname: '127.0.0.1' }, resolve) as http.Server;
  });
  cleanup(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return `http://127.0.0.1:${info.port}`;
}

function webRequest(request: Request): RouteRequest {
  const url = new URL(request.url);
  return {
    method: request.method,
    path: url.pathname + url.search,
    headers: request.headers,
    bytes: async () => new Uint8Array(await request.arrayBuffer()),
    text: () => request.text(),
    json: <T>() => request.json() as Promise<T>,
  };
}

/** A Reply as a web Response (Set-Cookie lines appended one by one). */
export function toResponse(reply: Reply | Response): Response {
  if (reply instanceof Response) return reply;
  const headers = new Headers(reply.headers);
  for (const line of reply.setCookie ?? []) headers.append('set-cookie', line);
  return new Response(reply.body ?? null, { status: reply.status, headers });
}

/** `new HttpIdempotency(...).handle(request, handler)` called directly; served with @hono/node-server. */
export const webCore: AdapterHarness = {
  name: 'web core',
  socket: false,
  build(options, route, cleanup) {
    const idem = new HttpIdempotency<Queryable>(options);
    const fetchFn = (request: Request) => idem.handle(request, async (req, ctx) => toResponse(await route(webRequest(req), ctx)));
    return {
      send: async (path, init) => fetchFn(new Request('http://api.test' + path, init)),
      serve: () => serveFetch(fetchFn, cleanup),
    };
  },
};

type HonoEnv = { Variables: IdempotencyVariables<Queryable> };

/** A Hono app (`app.request()`), with Hono's default error behaviour but quiet. */
export function honoApp(): Hono<HonoEnv> {
  const app = new Hono<HonoEnv>();
  app.onError((error, c) => (error instanceof HTTPException ? error.getResponse() : c.text('Internal Server Error', 500)));
  return app;
}

/** The Hono middleware on `app.all('*')`, answering through c.header / c.body; served with @hono/node-server. */
export const hono: AdapterHarness = {
  name: 'hono',
  socket: false,
  build(options, route, cleanup) {
    const app = honoApp();
    app.all('*', honoIdempotency<Queryable>(options), async (c) => {
      const url = new URL(c.req.url);
      const reply = await route(
        {
          method: c.req.method,
          path: url.pathname + url.search,
          headers: c.req.raw.headers,
          bytes: async () => new Uint8Array(await c.req.arrayBuffer()),
          text: () => c.req.text(),
          json: <T>() => c.req.json<T>(),
        },
        c.get('idem'),
      );
      if (reply instanceof Response) return reply;
      for (const [name, value] of Object.entries(reply.headers ?? {})) c.header(name, value);
      for (const line of reply.setCookie ?? []) c.header('set-cookie', line, { append: true });
      if (reply.body === undefined || reply.body === null) return c.body(null, reply.status as StatusCode);
      return c.body(typeof reply.body === 'string' ? reply.body : (reply.body as Uint8Array<ArrayBuffer>), reply.status as ContentfulStatusCode);
    });
    return {
      send: async (path, init) => app.request(path, init),
      serve: () => serveFetch(app.fetch, cleanup),
    };
  },
};

/** A final Express error handler that keeps the test output quiet. */
export const lastResort: ErrorRequestHandler = (_error, _req, res, _next) => {
  if (res.headersSent) return void res.end(); // too late to answer: finish quietly
  res.status(599).send('reached the app error handler');
};

function expressBody(req: ExpressRequest): Uint8Array {
  const body: unknown = req.body;
  if (body === undefined || body === null) return new Uint8Array();
  // A body express.json() did not parse (e.g. octet-stream) is the raw Buffer the middleware read.
  if (body instanceof Uint8Array) return body;
  if (typeof body !== 'object') throw new Error(`req.body is neither a Buffer nor parsed JSON: ${typeof body}`);
  return Buffer.from(JSON.stringify(body));
}

/**
 * An Express 5 app with express.json(), the middleware on every path and `idem.onError` after
 * the route, listening on port 0 and reached with fetch. Answers through res.setHeader / res.end.
 */
export const expressHarness: AdapterHarness = {
  name: 'express',
  socket: true,
  build(options, route, cleanup) {
    const app = express();
    app.use(express.json());
    const idem = expressIdempotency<Queryable>(options);
    app.all('/{*path}', idem, async (req, res) => {
      const reply = await route(
        {
          method: req.method,
          path: req.originalUrl,
          headers: new Headers(Object.entries(req.headersDistinct).flatMap(([n, vs]) => (vs ?? []).map((v) => [n, v] as [string, string]))),
          bytes: async () => expressBody(req),
          text: async () => Buffer.from(expressBody(req)).toString('utf8'),
          json: async <T>() => (req.body instanceof Uint8Array ? JSON.parse(Buffer.from(req.body).toString('utf8')) : req.body) as T,
        },
        res.locals.idem as Ctx,
      );
      const response = toResponse(reply);
      res.status(response.status);
      response.headers.forEach((value, name) => {
        if (name !== 'set-cookie') res.setHeader(name, value);
      });
      const cookies = response.headers.getSetCookie();
      if (cookies.length > 0) res.setHeader('set-cookie', cookies);
      res.end(response.body ? Buffer.from(await response.arrayBuffer()) : undefined);
    });
    app.use(idem.onError);
    app.use(lastResort);
    let url: Promise<string> | undefined;
    const serveOnce = () =>
      (url ??= listen(http.createServer(app)).then((server) => {
        cleanup(server.close);
        return server.url;
      }));
    return {
      send: async (path, init) => fetch((await serveOnce()) + path, init),
      serve: serveOnce,
    };
  },
};

export const harnesses: AdapterHarness[] = [webCore, hono, expressHarness];
