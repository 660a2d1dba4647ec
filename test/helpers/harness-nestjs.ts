/**
 * The NestJS harnesses of the adapter contract suite: a real NestJS 11 app (`@nestjs/core`) with
 * `IdempotencyModule.forRoot(options)` and one controller whose handler, marked
 * `@Idempotent()`, answers every method and path, on the Express platform and on the Fastify
 * platform, created with `{ rawBody: true }`, listening on port 0 and reached with fetch. The
 * handler gets the context through `@IdemContext()` and answers through the platform's own
 * response (`@Res()`). Decorators need `experimentalDecorators` (tsconfig.json); no
 * `emitDecoratorMetadata`: every injection names its token.
 */
import type { IncomingMessage } from 'node:http';
import { All, Controller, Inject, Module, Req, Res, type DynamicModule, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { ExpressAdapter } from '@nestjs/platform-express';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Response as ExpressResponse } from 'express';
import { IdempotencyModule, Idempotent, IdemContext } from '../../src/nestjs/index.js';
import type { IdempotencyOptions } from '../../src/http/idempotency.js';
import type { Queryable } from '../../src/postgres/client.js';
import type { AdapterHarness, Ctx, Reply, Route, RouteRequest } from './adapter-harness.js';
import { toResponse } from './adapter-harness.js';
import { fastifyRouteRequest, fastifySend } from './harness-fastify.js';

const ROUTE = Symbol('test.route');

type ExpressReq = IncomingMessage & { body?: unknown; originalUrl: string; headersDistinct: Record<string, string[] | undefined> };

function expressRouteRequest(req: ExpressReq): RouteRequest {
  const bytes = () => {
    const body = req.body;
    if (body === undefined || body === null) return new Uint8Array();
    if (body instanceof Uint8Array) return body;
    return Buffer.from(JSON.stringify(body));
  };
  return {
    method: req.method ?? 'GET',
    path: req.originalUrl,
    headers: new Headers(Object.entries(req.headersDistinct).flatMap(([n, vs]) => (vs ?? []).map((v) => [n, v] as [string, string]))),
    bytes: async () => bytes(),
    text: async () => Buffer.from(bytes()).toString('utf8'),
    json: async <T>() => (req.body instanceof Uint8Array ? JSON.parse(Buffer.from(req.body).toString('utf8')) : req.body) as T,
  };
}

async function expressSend(res: ExpressResponse, answer: Reply | Response): Promise<void> {
  const response = toResponse(answer);
  res.status(response.status);
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie') res.setHeader(name, value);
  });
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) res.setHeader('set-cookie', cookies);
  res.end(response.body ? Buffer.from(await response.arrayBuffer()) : undefined);
}

@Controller()
class HarnessController {
  constructor(@Inject(ROUTE) private readonly route: Route) {}

  @All('*')
  @Idempotent()
  async handle(@Req() req: ExpressReq | FastifyRequest, @Res() res: ExpressResponse | FastifyReply, @IdemContext() idem: Ctx): Promise<unknown> {
    if ('raw' in req) {
      const answer = await this.route(fastifyRouteRequest(req), idem);
      // With @Res() Nest sends nothing: a web Response goes through reply.send as well.
      return answer instanceof Response ? (res as FastifyReply).send(answer) : fastifySend(res as FastifyReply, answer);
    }
    return expressSend(res as ExpressResponse, await this.route(expressRouteRequest(req), idem));
  }
}

@Module({})
class HarnessModule {
  static with(options: IdempotencyOptions<Queryable>, route: Route): DynamicModule {
    return {
      module: HarnessModule,
      imports: [IdempotencyModule.forRoot(options)],
      controllers: [HarnessController],
      providers: [{ provide: ROUTE, useValue: route }],
    };
  }
}

/** Creates and starts a NestJS app on the given platform (with `rawBody` unless told), on 127.0.0.1:0; returns its URL. */
export async function startNest(
  platform: 'express' | 'fastify',
  module: DynamicModule | (new () => unknown),
  cleanup: (fn: () => Promise<void>) => void,
  { rawBody = true }: { rawBody?: boolean } = {},
): Promise<{ app: INestApplication; url: string }> {
  const adapter = platform === 'express' ? new ExpressAdapter() : new FastifyAdapter();
  if (adapter instanceof FastifyAdapter) {
    adapter.getInstance().addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
  }
  const app = await NestFactory.create(module, adapter, { logger: false, rawBody, abortOnError: false });
  cleanup(async () => void (await app.close()));
  // No server-side idle timeout, as in harness-next.ts: fetch reuses a connection across the gap
  // between two store groups, and Node's 5 s keepAliveTimeout could end it as undici sends (ECONNRESET).
  (app.getHttpServer() as { keepAliveTimeout: number }).keepAliveTimeout = 0;
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1').replace('localhost', '127.0.0.1');
  return { app, url };
}

function nestHarness(platform: 'express' | 'fastify'): AdapterHarness {
  return {
    name: platform === 'express' ? 'nestjs (express)' : 'nestjs (fastify)',
    socket: true,
    build(options, route, cleanup) {
      let url: Promise<string> | undefined;
      const serve = () => (url ??= startNest(platform, HarnessModule.with(options, route), cleanup).then((started) => started.url));
      return {
        send: async (path, init) => fetch((await serve()) + path, init),
        serve,
      };
    },
  };
}

export const nestExpressHarness = nestHarness('express');
export const nestFastifyHarness = nestHarness('fastify');
