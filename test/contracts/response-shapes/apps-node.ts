/**
 * The response-shape rows on the adapters over Node's response: Express 5, Koa 3 and
 * Fastify 5, each answering with the framework's own API.
 */
import http from 'node:http';
import { createReadStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pipeline, Readable } from 'node:stream';
import express, { type NextFunction, type Request as ExpressRequest, type Response as ExpressResponse } from 'express';
import Koa from 'koa';
import Fastify from 'fastify';
import type { IdempotencyContext } from '../../../src/http/context.js';
import { idempotency as expressIdempotency } from '../../../src/express/index.js';
import { idempotency as koaIdempotency } from '../../../src/koa/index.js';
import { idempotency as fastifyIdempotency } from '../../../src/fastify/index.js';
import { listen } from '../../helpers/adapter-harness.js';
import { rowHeaders, type ShapeApp, type ShapeSend } from './app.js';
import { BYTES, charge, chunks, CHUNKS, nodeStream, OBJECT, shapeOf, TEXT, webStream } from './shapes.js';

type Ctx = IdempotencyContext<unknown> | undefined;

/** The file the file rows send: the row's text. */
const DIR = mkdtempSync(path.join(tmpdir(), 'idem-shapes-'));
export const FILE = path.join(DIR, 'receipt.csv');
writeFileSync(FILE, TEXT);
process.once('exit', () => rmSync(DIR, { recursive: true, force: true }));

const ONLY = {
  observable: 'NestJS only',
  'send without return': 'Fastify only',
  'return reply': 'Fastify only',
} as const;

async function serveNode(handler: http.RequestListener, cleanup: (fn: () => Promise<void>) => void): Promise<ShapeSend> {
  const server = await listen(http.createServer(handler));
  cleanup(server.close);
  return (p, init) => fetch(server.url + p, init);
}

async function expressRow(req: ExpressRequest, res: ExpressResponse, next: NextFunction): Promise<void> {
  const shape = shapeOf(req.path);
  const { key, fail } = rowHeaders((name) => req.headers[name]);
  if (shape !== 'stream errors before a phase') await charge(res.locals.idem as Ctx, key);
  // A stream's error goes to next(error): the documented way, so idem.onError sees it.
  const pipe = (stream: Readable) => {
    stream.once('error', next);
    stream.pipe(res);
  };
  switch (shape) {
    case 'buffer':
      return void res.status(201).type('text/csv').send(Buffer.from(TEXT));
    case 'string':
    case 'HEAD':
      return void res.status(201).type('text/plain').send(TEXT);
    case 'uint8array':
      return void res.status(201).type('application/octet-stream').send(BYTES);
    case 'json':
      return void res.status(201).json(OBJECT);
    case 'stream of buffers':
    case 'stream errors before a phase':
    case 'stream errors after a phase':
      res.status(201).type('text/csv');
      return pipe(nodeStream({ fail }));
    case 'stream of strings':
      res.status(201).type('text/csv');
      return pipe(nodeStream({ strings: true }));
    case 'async iterable':
      res.status(201).type('text/csv');
      try {
        for await (const chunk of chunks(fail)) res.write(chunk);
      } catch (error) {
        return next(error);
      }
      return void res.end();
    case 'web stream':
      res.status(201).type('text/csv');
      return pipe(Readable.fromWeb(webStream() as never));
    case '204':
      return void res.status(204).end();
    case '304':
      return void res.status(304).set('etag', '"v1"').end();
    case 'file':
      return void res.status(201).sendFile(FILE, (error) => error && next(error));
    case 'piped stream errors':
      res.status(201).type('text/csv');
      return void pipeline(nodeStream({ fail }), res, () => undefined);
    case 'node writes':
      res.writeHead(201, { 'content-type': 'text/csv' });
      res.write(CHUNKS[0]);
      res.write(Buffer.from(CHUNKS[1]));
      return void res.end(CHUNKS[2]);
    default:
      return void res.status(404).send('no row');
  }
}

export const expressShapes: ShapeApp = {
  name: 'express',
  absent: { ...ONLY, hijack: 'no hijack: every write goes through res.write / res.end, which idem holds (the node writes row)' },
  async start(options, cleanup) {
    const app = express();
    const idem = options && expressIdempotency<unknown>(options);
    if (idem) app.use(idem);
    app.all('/{*path}', (req, res, next) => void expressRow(req, res, next).catch(next));
    if (idem) app.use(idem.onError);
    app.use(((_error, _req, res, _next) => {
      if (res.headersSent) return void res.end();
      res.status(500).send('Internal Server Error');
    }) as express.ErrorRequestHandler);
    return serveNode(app, cleanup);
  },
};

async function koaRow(ctx: Koa.Context): Promise<void> {
  const shape = shapeOf(ctx.path);
  const { key, fail } = rowHeaders((name) => ctx.headers[name]);
  if (shape !== 'stream errors before a phase') await charge(ctx.state.idem as Ctx, key);
  ctx.status = 201;
  switch (shape) {
    case 'buffer':
      ctx.type = 'text/csv';
      ctx.body = Buffer.from(TEXT);
      return;
    case 'string':
    case 'HEAD':
      ctx.type = 'text/plain';
      ctx.body = TEXT;
      return;
    case 'uint8array':
      ctx.type = 'application/octet-stream';
      ctx.body = BYTES;
      return;
    case 'json':
      ctx.body = OBJECT;
      return;
    case 'stream of buffers':
    case 'stream errors before a phase':
    case 'stream errors after a phase':
      ctx.type = 'text/csv';
      ctx.body = nodeStream({ fail });
      return;
    case 'stream of strings':
      ctx.type = 'text/csv';
      ctx.body = Readable.from(CHUNKS);
      return;
    case 'web stream':
      ctx.type = 'text/csv';
      ctx.body = webStream();
      return;
    case '204':
      ctx.status = 204;
      return;
    case '304':
      ctx.status = 304;
      ctx.set('etag', '"v1"');
      return;
    case 'file':
      ctx.type = 'text/csv';
      ctx.body = createReadStream(FILE);
      return;
    case 'hijack':
      ctx.respond = false;
      ctx.res.writeHead(201, { 'content-type': 'text/csv' });
      ctx.res.end(TEXT);
      return;
    default:
      ctx.status = 404;
  }
}

export const koaShapes: ShapeApp = {
  name: 'koa',
  absent: {
    ...ONLY,
    'async iterable': 'ctx.body takes Node and web streams, Blobs and Responses; an async iterable goes in as Readable.from (the stream rows)',
    'node writes': 'writing to ctx.res is ctx.respond = false: the hijack row',
    'piped stream errors': 'Koa pipes a ctx.body stream itself (the stream error rows)',
  },
  async start(options, cleanup) {
    const app = new Koa();
    app.silent = true;
    if (options) app.use(koaIdempotency<unknown>(options));
    app.use(koaRow);
    return serveNode(app.callback(), cleanup);
  },
};

export const fastifyShapes: ShapeApp = {
  name: 'fastify',
  absent: {
    observable: 'NestJS only',
    'async iterable': 'reply.send takes Node and web streams; an async iterable goes in as Readable.from (the stream rows)',
    'node writes': 'Fastify requires reply.hijack() before writing to reply.raw: the hijack row',
    'piped stream errors': 'reply.send pipes a stream itself (the stream error rows)',
  },
  async start(options, cleanup) {
    const app = Fastify({ logger: false });
    if (options) await app.register(fastifyIdempotency, options as never);
    app.route({
      method: ['POST', 'HEAD', 'GET'],
      url: '/*',
      config: { idempotency: options !== undefined },
      handler: async (request, reply) => {
        const shape = shapeOf(request.url);
        const { key, fail } = rowHeaders((name) => request.headers[name]);
        if (shape !== 'stream errors before a phase') await charge(request.idem as Ctx, key);
        switch (shape) {
          case 'buffer':
            return reply.code(201).type('text/csv').send(Buffer.from(TEXT));
          case 'string':
          case 'HEAD':
            return reply.code(201).type('text/plain; charset=utf-8').send(TEXT);
          case 'uint8array':
            return reply.code(201).type('application/octet-stream').send(BYTES);
          case 'json':
            reply.code(201);
            return OBJECT;
          case 'stream of buffers':
          case 'stream errors before a phase':
          case 'stream errors after a phase':
            return reply.code(201).type('text/csv').send(nodeStream({ fail }));
          case 'stream of strings':
            return reply.code(201).type('text/csv').send(Readable.from(CHUNKS));
          case 'web stream':
            return reply.code(201).type('text/csv').send(webStream());
          case '204':
            return reply.code(204).send();
          case '304':
            return reply.code(304).header('etag', '"v1"').send();
          case 'file':
            return reply.code(201).type('text/csv').send(createReadStream(FILE));
          case 'send without return':
            reply.code(201).send(OBJECT);
            return;
          case 'return reply':
            return reply.code(201).send(OBJECT);
          case 'hijack':
            reply.hijack();
            reply.raw.writeHead(201, { 'content-type': 'text/csv' });
            reply.raw.end(TEXT);
            return reply;
          default:
            return reply.code(404).send('no row');
        }
      },
    });
    const address = await app.listen({ port: 0, host: '127.0.0.1' });
    cleanup(async () => void (await app.close()));
    return (p, init) => fetch(address + p, init);
  },
};
