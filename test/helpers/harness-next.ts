/**
 * The adapter contract harness for Next.js: the example app examples/next, built once
 * (test/helpers/next-build.ts) and served in this process through Next's own server API
 * (`next({ dev: false })`, `getRequestHandler()`) on a node:http server on port 0. Each
 * harness app registers its idem options and route on globalThis under a random id; the app's
 * route `app/h/[id]/[[...path]]/route.ts`, compiled by Next, wraps them with
 * `withIdempotency` and answers `/h/<id>/...`.
 */
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import type { IdempotencyContext } from '../../src/http/context.js';
import type { IdempotencyOptions } from '../../src/http/idempotency.js';
import { type AdapterHarness, type Ctx, listen, toResponse } from './adapter-harness.js';
import { ensureNextBuild, NEXT_APP } from './next-build.js';

interface HarnessEntry {
  options: IdempotencyOptions<unknown>;
  route(request: Request, idem: IdempotencyContext<unknown> | undefined): Promise<Response>;
}

const REGISTRY = Symbol.for('idem.next.harness');
const shared = globalThis as { [REGISTRY]?: Map<string, HarnessEntry> };
shared[REGISTRY] ??= new Map();
const registry: Map<string, HarnessEntry> = shared[REGISTRY];

/** The slice of Next's custom-server API used here (typed locally: Next's types change `process.env` globally). */
interface NextApp {
  prepare(): Promise<void>;
  getRequestHandler(): (req: http.IncomingMessage, res: http.ServerResponse) => Promise<void>;
  close(): Promise<void>;
}
type CreateNext = (options: { dev: boolean; dir: string; hostname?: string; quiet?: boolean }) => NextApp;

let server: Promise<{ url: string; close(): Promise<void> }> | undefined;

/** Builds (if needed) and starts the example app in this process, once. @returns its base URL */
export async function startNext(): Promise<string> {
  server ??= (async () => {
    await ensureNextBuild();
    const specifier = 'next'; // not a literal: keeps Next's global types out of this program
    const next = ((await import(specifier)) as { default: CreateNext }).default;
    const app = next({ dev: false, dir: NEXT_APP, hostname: '127.0.0.1', quiet: true });
    await app.prepare();
    const handle = app.getRequestHandler();
    const httpServer = http.createServer((req, res) => void handle(req, res));
    // One server answers every test of the file, so fetch's pool reuses a connection across the
    // gaps between tests (a store's `before` starting PGlite takes seconds on a busy machine). By
    // default Node ends a connection idle for 5 s (keepAliveTimeout) while undici, whose idle
    // timers are coarse, may send on it at that very moment: ECONNRESET, "fetch failed". With no
    // server-side idle timeout only the client ends idle connections; stopNext closes them all.
    httpServer.keepAliveTimeout = 0;
    const listening = await listen(httpServer);
    return {
      url: listening.url,
      close: async () => {
        await listening.close();
        await app.close();
      },
    };
  })();
  return (await server).url;
}

/** Stops the in-process Next server (call from the test file's `after`). */
export async function stopNext(): Promise<void> {
  const running = server;
  server = undefined;
  if (running) await (await running).close();
}

export const nextHarness: AdapterHarness = {
  name: 'next',
  socket: true,
  build(options, route, cleanup) {
    const id = randomUUID();
    const prefix = `/h/${id}`;
    registry.set(id, {
      options: options as IdempotencyOptions<unknown>,
      route: async (request, idem) => {
        const url = new URL(request.url);
        return toResponse(
          await route(
            {
              method: request.method,
              path: url.pathname.slice(prefix.length) + url.search,
              headers: request.headers,
              bytes: async () => new Uint8Array(await request.arrayBuffer()),
              text: () => request.text(),
              json: <T>() => request.json() as Promise<T>,
            },
            idem as Ctx,
          ),
        );
      },
    });
    cleanup(async () => void registry.delete(id));
    return {
      send: async (path, init) => fetch((await startNext()) + prefix + path, init),
      serve: async () => (await startNext()) + prefix,
    };
  },
};
