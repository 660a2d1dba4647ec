/**
 * The response-shape rows on NestJS 11, on the Express and on the Fastify platform: one
 * controller answering by return value (Nest writes it), `StreamableFile` and an Observable,
 * with `@Res({ passthrough: true })` only to set status and headers. Plain: the same module
 * with idem protecting no method.
 */
import { createReadStream } from 'node:fs';
import { pipeline } from 'node:stream';
import { All, Controller, Module, Post, Req, Res, StreamableFile, type DynamicModule } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Request as ExpressRequest, Response as ExpressResponse } from 'express';
import { of } from 'rxjs';
import { IdempotencyModule, Idempotent, IdemContext } from '../../../src/nestjs/index.js';
import type { IdempotencyOptions } from '../../../src/http/idempotency.js';
import type { IdempotencyContext } from '../../../src/http/context.js';
import { MemoryStore } from '../../../src/memory/index.js';
import { startNest } from '../../helpers/harness-nestjs.js';
import { FILE } from './apps-node.js';
import { rowHeaders, type ShapeApp } from './app.js';
import { BYTES, charge, nodeStream, OBJECT, shapeOf, TEXT } from './shapes.js';

/** What both platforms' response objects share. */
type PlatformResponse = Pick<ExpressResponse, 'status' | 'type' | 'header'> | Pick<FastifyReply, 'status' | 'type' | 'header'>;

@Controller()
class ShapeController {
  /** The piped row: `@Res()` without passthrough, the route pipes into Node's response itself. */
  @Post('shape/piped-stream-errors')
  @Idempotent()
  async piped(
    @Req() req: ExpressRequest | FastifyRequest,
    @Res() res: ExpressResponse | FastifyReply,
    @IdemContext() idem: IdempotencyContext<unknown> | undefined,
  ): Promise<void> {
    const { key, fail } = rowHeaders((name) => req.headers[name]);
    await charge(idem, key);
    const raw = 'raw' in res ? res.raw : res;
    raw.writeHead(201, { 'content-type': 'text/csv' });
    pipeline(nodeStream({ fail }), raw, () => undefined);
  }

  @All('*')
  @Idempotent()
  async handle(
    @Req() req: ExpressRequest | FastifyRequest,
    @Res({ passthrough: true }) res: PlatformResponse,
    @IdemContext() idem: IdempotencyContext<unknown> | undefined,
  ): Promise<unknown> {
    const shape = shapeOf(req.url);
    const { key, fail } = rowHeaders((name) => req.headers[name]);
    if (shape !== 'stream errors before a phase') await charge(idem, key);
    const r = res as ExpressResponse; // the calls below exist with the same meaning on a Fastify reply
    r.status(201);
    switch (shape) {
      case 'buffer':
        r.type('text/csv');
        return Buffer.from(TEXT);
      case 'string':
      case 'HEAD':
        r.type('text/plain; charset=utf-8');
        return TEXT;
      case 'uint8array':
        r.type('application/octet-stream');
        return BYTES;
      case 'json':
        return OBJECT;
      case 'stream of buffers':
      case 'stream errors before a phase':
      case 'stream errors after a phase':
        return new StreamableFile(nodeStream({ fail }), { type: 'text/csv' });
      case 'stream of strings':
        return new StreamableFile(nodeStream({ strings: true }), { type: 'text/csv' });
      case 'file':
        return new StreamableFile(createReadStream(FILE), { type: 'text/csv' });
      case 'observable':
        return of({ ...OBJECT, step: 1 }, OBJECT);
      case '204':
        r.status(204);
        return undefined;
      case '304':
        r.status(304);
        r.header('etag', '"v1"');
        return undefined;
      default:
        r.status(404);
        return 'no row';
    }
  }
}

@Module({})
class ShapeModule {
  static with(options: IdempotencyOptions<unknown>): DynamicModule {
    return { module: ShapeModule, imports: [IdempotencyModule.forRoot(options)], controllers: [ShapeController] };
  }
}

function nestShapes(platform: 'express' | 'fastify'): ShapeApp {
  return {
    name: `nestjs (${platform})`,
    absent: {
      'async iterable': 'Nest sends a stream as a StreamableFile of a Node Readable (the stream rows)',
      'web stream': 'StreamableFile takes a Node Readable or bytes; a web stream goes in through Readable.fromWeb (the stream rows)',
      'send without return': "Fastify's own reply API: the Fastify rows",
      'return reply': "Fastify's own reply API: the Fastify rows",
      'node writes': "a handler with @Res() writes through the platform's response: the Express and Fastify rows",
      hijack: "the platform's: the Fastify row (reply.hijack())",
    },
    async start(options, cleanup) {
      // Plain: idem protecting no method, so the interceptor passes every request through.
      const { url } = await startNest(platform, ShapeModule.with(options ?? { store: new MemoryStore(), methods: [] }), cleanup);
      return (path, init) => fetch(url + path, init);
    },
  };
}

export const nestShapeApps: ShapeApp[] = [nestShapes('express'), nestShapes('fastify')];
