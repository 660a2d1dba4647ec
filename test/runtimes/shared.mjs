/**
 * What the runtime suite (suite.mjs) and its crash-drill server (server.mjs) share: the app, the
 * runtime's own name, its executable and how it serves a fetch handler on a loopback port.
 * Plain JavaScript over web-standard APIs and `node:` modules, so Node, Bun and Deno run the
 * same file from a project that installed idem's tarball (scripts/runtimes.sh).
 */
import { Hono } from 'hono';
import { idempotency } from 'idem/hono';

/** `node`, `bun` or `deno`, with its version. */
export function runtime() {
  if (typeof globalThis.Bun !== 'undefined') return { name: 'bun', version: globalThis.Bun.version };
  if (typeof globalThis.Deno !== 'undefined') return { name: 'deno', version: globalThis.Deno.version.deno };
  return { name: 'node', version: process.versions.node };
}

/** The command that runs a script of this directory on the same runtime. */
export function command(script) {
  const name = runtime().name;
  if (name === 'deno') return [globalThis.Deno.execPath(), ['run', '-A', script]];
  return [process.execPath, [script]];
}

/**
 * Serves `fetch` on 127.0.0.1 with the runtime's own server (Bun.serve, Deno.serve, node:http
 * through @hono/node-server), and resolves to its port and a close function.
 */
export async function serve(fetch) {
  const name = runtime().name;
  if (name === 'bun') {
    const server = globalThis.Bun.serve({ hostname: '127.0.0.1', port: 0, fetch });
    return { port: server.port, close: () => server.stop(true) };
  }
  if (name === 'deno') {
    const { promise, resolve } = Promise.withResolvers();
    const server = globalThis.Deno.serve({ hostname: '127.0.0.1', port: 0, onListen: resolve }, fetch);
    const { port } = await promise;
    return { port, close: () => server.shutdown() };
  }
  const { serve: nodeServe } = await import('@hono/node-server');
  const { promise, resolve } = Promise.withResolvers();
  const server = nodeServe({ fetch, hostname: '127.0.0.1', port: 0 }, (info) => resolve(info.port));
  const port = await promise;
  return { port, close: () => new Promise((done) => server.close(() => done())) };
}

/**
 * `POST /charges` behind idem: `effect(tx, body)` runs in an atomic phase (a no-op transaction
 * on stores without one) and its result is the 201's body. `hold`, when set, is awaited after
 * the phase committed and before the response: the crash drill kills the process there.
 */
export function createApp(store, effect, { hold, leaseMs } = {}) {
  const app = new Hono();
  app.post('/charges', idempotency({ store, required: true, ...(leaseMs ? { leaseMs } : {}) }), async (c) => {
    const idem = c.get('idem');
    const body = await c.req.json();
    const charge = await idem.phase('charge', (tx) => effect(tx, body));
    if (hold) await hold(charge);
    return c.json(charge, 201);
  });
  return app;
}
