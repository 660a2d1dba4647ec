/**
 * The response-shape rows on the fetch-style adapters: the web-standard core, Hono (its own
 * `c.*` answers and `hono/streaming`), Next.js route handlers and the three Lambda event formats.
 */
import http from 'node:http';
import { Hono } from 'hono';
import { stream as honoStream } from 'hono/streaming';
import { HttpIdempotency } from '../../../src/http/idempotency.js';
import type { IdempotencyContext } from '../../../src/http/context.js';
import { idempotency as honoIdempotency } from '../../../src/hono/index.js';
import { withIdempotency } from '../../../src/lambda/index.js';
import { MemoryStore } from '../../../src/memory/index.js';
import { type EventFormat, fromResult, lambdaContext, toEvent } from '../../helpers/harness-lambda.js';
import { nextHarness } from '../../helpers/harness-next.js';
import { rowHeaders, type ShapeApp } from './app.js';
import { BYTES, charge, OBJECT, shapeOf, TEXT, webStream, CHUNKS } from './shapes.js';

type Ctx = IdempotencyContext<unknown> | undefined;

const NODE_STREAM = 'a web Response body is a web ReadableStream (the web stream row); Node streams go in through Readable.toWeb';
const WEB_ABSENT = {
  'stream of buffers': NODE_STREAM,
  'stream of strings': NODE_STREAM,
  file: 'no file API: a file is a web ReadableStream (the web stream row)',
  observable: 'NestJS only',
  'send without return': 'Fastify only',
  'return reply': 'Fastify only',
  'node writes': 'no Node response: the handler returns a web Response',
  'piped stream errors': 'no Node response: the handler returns a web Response (the stream error rows)',
  hijack: 'no socket to take: the handler returns a web Response',
} as const;

/** A row answered as a web Response (web core, Next.js). */
async function webAnswer(request: Request, ctx: Ctx): Promise<Response> {
  const shape = shapeOf(new URL(request.url).pathname);
  const { key, fail } = rowHeaders((name) => request.headers.get(name));
  if (shape !== 'stream errors before a phase') await charge(ctx, key);
  switch (shape) {
    case 'buffer':
      return new Response(Buffer.from(TEXT), { status: 201, headers: { 'content-type': 'text/csv' } });
    case 'string':
    case 'HEAD':
      return new Response(TEXT, { status: 201, headers: { 'content-type': 'text/plain; charset=utf-8' } });
    case 'uint8array':
      return new Response(BYTES, { status: 201, headers: { 'content-type': 'application/octet-stream' } });
    case 'json':
      return Response.json(OBJECT, { status: 201 });
    case 'async iterable':
      return new Response(
        (async function* () {
          for (const chunk of CHUNKS) yield new TextEncoder().encode(chunk);
        })() as unknown as ConstructorParameters<typeof Response>[0],
        { status: 201, headers: { 'content-type': 'text/csv' } },
      );
    case 'web stream':
    case 'stream errors before a phase':
    case 'stream errors after a phase':
      return new Response(webStream(fail), { status: 201, headers: { 'content-type': 'text/csv' } });
    case '204':
      return new Response(null, { status: 204 });
    case '304':
      return new Response(null, { status: 304, headers: { etag: '"v1"' } });
    default:
      return new Response(`no row ${shape}`, { status: 404 });
  }
}

/** Serves a fetch handler on node:http through @hono/node-server. */
async function serveFetch(fetchFn: (request: Request) => Promise<Response>, cleanup: (fn: () => Promise<void>) => void) {
  const { serve } = await import('@hono/node-server');
  let server!: http.Server;
  const port = await new Promise<number>((resolve) => {
    server = serve({ fetch: fetchFn, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port)) as http.Server;
  });
  server.keepAliveTimeout = 0; // only the client ends idle connections (see harness-next.ts)
  cleanup(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  const base = `http://127.0.0.1:${port}`;
  return (path: string, init: RequestInit) => fetch(base + path, init);
}

export const webCoreShapes: ShapeApp = {
  name: 'web core',
  absent: { ...WEB_ABSENT },
  async start(options, cleanup) {
    const idem = options && new HttpIdempotency<unknown>(options);
    return serveFetch((request) => (idem ? idem.handle(request, webAnswer) : webAnswer(request, undefined)), cleanup);
  },
};

export const honoShapes: ShapeApp = {
  name: 'hono',
  absent: { ...WEB_ABSENT },
  async start(options, cleanup) {
    const app = new Hono<{ Variables: { idem: Ctx } }>();
    app.onError((_error, c) => c.text('Internal Server Error', 500));
    if (options) app.use('*', honoIdempotency<unknown>(options));
    app.all('*', async (c) => {
      const shape = shapeOf(c.req.path);
      const { key, fail } = rowHeaders((name) => c.req.header(name));
      const ctx = c.get('idem');
      if (shape !== 'stream errors before a phase') await charge(ctx, key);
      switch (shape) {
        case 'buffer':
          c.header('content-type', 'text/csv');
          return c.body(Buffer.from(TEXT), 201);
        case 'string':
        case 'HEAD':
          return c.text(TEXT, 201);
        case 'uint8array':
          c.header('content-type', 'application/octet-stream');
          return c.body(BYTES, 201);
        case 'json':
          return c.json(OBJECT, 201);
        case 'async iterable':
          c.status(201);
          c.header('content-type', 'text/csv');
          return honoStream(c, async (s) => {
            for (const chunk of CHUNKS) await s.write(chunk);
          });
        case 'web stream':
        case 'stream errors before a phase':
        case 'stream errors after a phase':
          c.header('content-type', 'text/csv');
          return c.body(webStream(fail), 201);
        case '204':
          return c.body(null, 204);
        case '304':
          c.header('etag', '"v1"');
          return c.body(null, 304);
        default:
          return c.text('no row', 404);
      }
    });
    return serveFetch(async (request) => app.fetch(request), cleanup);
  },
};

export const nextShapes: ShapeApp = {
  name: 'next',
  absent: { ...WEB_ABSENT },
  async start(options, cleanup) {
    // Plain: the same route behind withIdempotency protecting no method (nothing claimed).
    const app = nextHarness.build(
      (options ?? { store: new MemoryStore(), methods: [] }) as Parameters<typeof nextHarness.build>[0],
      // The Next harness hands the route its own view of the request: rebuild a Request for webAnswer.
      async (req, ctx) => webAnswer(new Request(`http://next.test${req.path}`, { method: req.method, headers: req.headers }), ctx as Ctx),
      cleanup,
    );
    const base = await app.serve();
    return (path, init) => freshFetch(base + path, init);
  },
};

/**
 * fetch on a new connection each time: the Next server outlives each store's apps, and a
 * kept-alive socket it closes after its keep-alive timeout (5 s, about a PGlite setup) while
 * fetch reuses it resets a POST that fetch does not retry.
 */
async function freshFetch(url: string, init: RequestInit): Promise<Response> {
  const request = new Request(url, init);
  const body = request.body ? Buffer.from(await request.arrayBuffer()) : undefined;
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: request.method, headers: Object.fromEntries(request.headers), agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', reject);
      res.on('end', () => {
        const headers = new Headers();
        for (const [name, values] of Object.entries(res.headersDistinct)) for (const v of values ?? []) headers.append(name, v);
        const status = res.statusCode ?? 0;
        resolve(new Response([204, 304].includes(status) ? null : Buffer.concat(chunks), { status, headers }));
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** A Lambda result for a row: a string body (base64 for bytes), as API Gateway takes it. */
async function lambdaAnswer(event: { headers?: Record<string, string | undefined>; rawPath?: string; path?: string }, ctx: Ctx) {
  const shape = shapeOf((event.rawPath ?? event.path)!);
  const { key } = rowHeaders((name) => event.headers?.[name]);
  await charge(ctx, key);
  switch (shape) {
    case 'buffer':
      return { statusCode: 201, headers: { 'content-type': 'text/csv' }, body: Buffer.from(TEXT).toString('base64'), isBase64Encoded: true };
    case 'string':
    case 'HEAD':
      return { statusCode: 201, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: TEXT };
    case 'uint8array':
      return { statusCode: 201, headers: { 'content-type': 'application/octet-stream' }, body: Buffer.from(BYTES).toString('base64'), isBase64Encoded: true };
    case 'json':
      return { statusCode: 201, headers: { 'content-type': 'application/json' }, body: JSON.stringify(OBJECT) };
    case '204':
      return { statusCode: 204 };
    case '304':
      return { statusCode: 304, headers: { etag: '"v1"' } };
    default:
      return { statusCode: 404, body: 'no row' };
  }
}

const STREAMLESS = 'a Lambda result body is a string (base64 for bytes): nothing streams, nothing fails mid-body';

function lambdaShapes(format: EventFormat): ShapeApp {
  return {
    name: `lambda ${format}`,
    absent: {
      ...WEB_ABSENT,
      'stream of buffers': STREAMLESS,
      'stream of strings': STREAMLESS,
      'async iterable': STREAMLESS,
      'web stream': STREAMLESS,
      file: STREAMLESS,
      'stream errors before a phase': STREAMLESS,
      'stream errors after a phase': STREAMLESS,
      'node writes': 'no Node response: the handler returns a result object',
      'piped stream errors': STREAMLESS,
      hijack: 'no socket to take: the handler returns a result object',
    },
    async start(options, cleanup) {
      const handler = options
        ? withIdempotency<unknown>(options, async (event, _context, idem) => lambdaAnswer(event as never, idem))
        : async (event: unknown) => lambdaAnswer(event as never, undefined);
      const invoke = async (request: Request) => fromResult(await handler(await toEvent(format, request), lambdaContext()));
      void cleanup;
      return (path, init) => invoke(new Request('https://api.test' + path, init));
    },
  };
}

export const lambdaShapeApps: ShapeApp[] = (['rest v1', 'http v2', 'function url'] as const).map(lambdaShapes);
