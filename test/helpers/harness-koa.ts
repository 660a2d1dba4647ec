/**
 * The adapter contract harness for Koa 3: a real Koa app with idem's middleware first and
 * `@koa/bodyparser` after it (so the suite also shows the parser still gets the body idem
 * read), listening on port 0 and reached with fetch.
 */
import http from 'node:http';
import Koa from 'koa';
import { bodyParser } from '@koa/bodyparser';
import { idempotency } from '../../src/koa/index.js';
import type { Queryable } from '../../src/postgres/client.js';
import { type AdapterHarness, type Ctx, listen, toResponse } from './adapter-harness.js';

/** The request body as the route sees it: the parser's raw text, or the stream idem put back. */
async function koaBody(ctx: Koa.Context): Promise<Uint8Array> {
  const raw = (ctx.request as { rawBody?: unknown }).rawBody;
  if (typeof raw === 'string') return Buffer.from(raw);
  const chunks: Buffer[] = [];
  for await (const chunk of ctx.req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export const koaHarness: AdapterHarness = {
  name: 'koa',
  socket: true,
  build(options, route, cleanup) {
    const app = new Koa();
    app.silent = true;
    app.use(idempotency<Queryable>(options));
    app.use(bodyParser());
    app.use(async (ctx) => {
      let body: Promise<Uint8Array> | undefined;
      const bytes = () => (body ??= koaBody(ctx));
      const headers = new Headers();
      for (const [name, values] of Object.entries(ctx.req.headersDistinct)) for (const v of values ?? []) headers.append(name, v);
      const reply = await route(
        {
          method: ctx.method,
          path: ctx.originalUrl,
          headers,
          bytes,
          text: async () => Buffer.from(await bytes()).toString('utf8'),
          json: async <T>() => JSON.parse(Buffer.from(await bytes()).toString('utf8')) as T,
        },
        ctx.state.idem as Ctx,
      );
      const response = toResponse(reply);
      ctx.status = response.status;
      response.headers.forEach((value, name) => {
        if (name !== 'set-cookie') ctx.set(name, value);
      });
      const cookies = response.headers.getSetCookie();
      if (cookies.length > 0) ctx.set('set-cookie', cookies);
      ctx.body = Buffer.from(await response.arrayBuffer()); // never null: Koa turns that into a 204
    });
    let url: Promise<string> | undefined;
    const serveOnce = () =>
      (url ??= listen(http.createServer(app.callback())).then((server) => {
        cleanup(server.close);
        return server.url;
      }));
    return {
      send: async (path, init) => fetch((await serveOnce()) + path, init),
      serve: serveOnce,
    };
  },
};
