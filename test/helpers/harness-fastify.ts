/**
 * The Fastify harness of the adapter contract suite: a real Fastify 5 app with the idem plugin,
 * one route on every path protected with `config: { idempotency: true }`, listening on port 0
 * and reached with fetch. Answers through reply.code / reply.header / reply.send.
 */
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { idempotency } from '../../src/fastify/index.js';
import type { Queryable } from '../../src/postgres/client.js';
import type { AdapterHarness, Ctx, Reply, Route, RouteRequest } from './adapter-harness.js';

declare module '../../src/fastify/index.js' {
  interface IdempotencyRegister {
    tx: Queryable;
  }
}

/** A Fastify app without logging, with a parser for raw bytes (octet-stream) as apps add one. */
export function fastifyApp(): FastifyInstance {
  const app = Fastify({ logger: false });
  app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
  return app;
}

/** The parsed `request.body` as the bytes a handler would have read. */
export function fastifyBody(request: FastifyRequest): Uint8Array {
  const body: unknown = request.body;
  if (body === undefined || body === null) return new Uint8Array();
  if (body instanceof Uint8Array) return body;
  if (typeof body === 'string') return Buffer.from(body);
  return Buffer.from(JSON.stringify(body));
}

/** The harness's view of a Fastify request. */
export function fastifyRouteRequest(request: FastifyRequest): RouteRequest {
  const headers = new Headers();
  for (const [name, value] of Object.entries(request.headers)) {
    for (const v of Array.isArray(value) ? value : value === undefined ? [] : [value]) headers.append(name, v);
  }
  return {
    method: request.method,
    path: request.url,
    headers,
    bytes: async () => fastifyBody(request),
    text: async () => Buffer.from(fastifyBody(request)).toString('utf8'),
    json: async <T>() =>
      (typeof request.body === 'object' && !(request.body instanceof Uint8Array)
        ? request.body
        : JSON.parse(Buffer.from(fastifyBody(request)).toString('utf8'))) as T,
  };
}

/** Sends a Reply through Fastify's reply API; a web Response is returned as it is (Fastify sends it). */
export function fastifySend(reply: FastifyReply, answer: Reply | Response): FastifyReply | Response {
  if (answer instanceof Response) return answer;
  reply.code(answer.status);
  for (const [name, value] of Object.entries(answer.headers ?? {})) reply.header(name, value);
  if (answer.setCookie?.length) reply.header('set-cookie', answer.setCookie);
  const body = answer.body;
  return reply.send(body === undefined || body === null ? undefined : typeof body === 'string' ? body : Buffer.from(body));
}

/** Listens once on 127.0.0.1:0; `cleanup` closes the app. */
export function serveOnce(
  app: { listen(o: { port: number; host: string }): Promise<string>; close(): Promise<unknown> },
  cleanup: (fn: () => Promise<void>) => void,
): () => Promise<string> {
  let url: Promise<string> | undefined;
  return () =>
    (url ??= app.listen({ port: 0, host: '127.0.0.1' }).then((address) => {
      cleanup(async () => void (await app.close()));
      return address;
    }));
}

export const fastifyHarness: AdapterHarness = {
  name: 'fastify',
  socket: true,
  build(options, route: Route, cleanup) {
    const app = fastifyApp();
    const ready = app.register(idempotency, options).after(() => {
      app.all('/*', { config: { idempotency: true } }, async (request, reply) =>
        fastifySend(reply, await route(fastifyRouteRequest(request), request.idem as Ctx)),
      );
    });
    const serve = serveOnce({ listen: async (o) => (await ready, app.listen(o)), close: () => app.close() }, cleanup);
    return {
      send: async (path, init) => fetch((await serve()) + path, init),
      serve,
    };
  },
};
