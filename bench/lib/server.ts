/**
 * The HTTP servers the load generator hits, run in a child process so that autocannon and the
 * server do not share one event loop. Prints `{"url": …}` on stdout once listening.
 *
 *   node --import tsx bench/lib/server.ts <hono|express|peers> <databaseUrl> <table> <redisUrl> <prefix>
 *
 * Every route answers 201 with a small JSON body from a no-op handler that counts its runs per
 * idempotency key (GET /__runs?key=… returns the count), so the peers' correctness is
 * measured on the same server that is timed.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import express from 'express';
import { Hono } from 'hono';
import pg from 'pg';
import { idempotency as expressIdem } from '../../src/express/index.js';
import { idempotency as honoIdem } from '../../src/hono/index.js';
import { MemoryStore } from '../../src/memory/index.js';
import { PostgresStore } from '../../src/postgres/index.js';

const [kind, databaseUrl, table, redisUrl, prefix] = process.argv.slice(2) as [string, string, string, string, string];
const pool = new pg.Pool({ connectionString: databaseUrl, max: 32 });
const store = new PostgresStore({ client: pool, table });
await store.migrate();

// `/idem-memory`: idem on the in-process store, no database round trip: the cost of idem's own
// HTTP path (key, scope, fingerprint, engine, replayed Response), the floor a finished-key
// cache in front of the database can reach.
const memoryStore = new MemoryStore();
// `/idem-cached`: the PostgreSQL store with the in-process replay cache on (protocol.md K20).
const REPLAY_CACHE = { maxBytes: 64 * 1024 * 1024 };

const runs = new Map<string, number>();
function noop(key: string | undefined): { ok: true } {
  if (key) runs.set(key, (runs.get(key) ?? 0) + 1);
  return { ok: true };
}
const keyOf = (headers: Record<string, unknown>) => headers['idempotency-key'] as string | undefined;

async function listen(server: http.Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function honoApp(): Hono {
  const app = new Hono();
  app.get('/__runs', (c) => c.json({ runs: runs.get(c.req.query('key') ?? '') ?? 0 }));
  app.post('/bare', (c) => c.json(noop(c.req.header('idempotency-key')), 201));
  app.post('/idem', honoIdem({ store }), (c) => c.json(noop(c.req.header('idempotency-key')), 201));
  app.post('/idem-memory', honoIdem({ store: memoryStore }), (c) => c.json(noop(c.req.header('idempotency-key')), 201));
  app.post('/idem-cached', honoIdem({ store, replayCache: REPLAY_CACHE }), (c) => c.json(noop(c.req.header('idempotency-key')), 201));
  return app;
}

async function expressApp(withPeers: boolean): Promise<express.Express> {
  const app = express();
  app.get('/__runs', (req, res) => {
    res.json({ runs: runs.get(String(req.query.key ?? '')) ?? 0 });
  });
  app.post('/bare', express.json(), (req, res) => {
    res.status(201).json(noop(keyOf(req.headers)));
  });
  const idem = expressIdem({ store });
  app.post('/idem', express.json(), idem, (req, res) => {
    res.status(201).json(noop(keyOf(req.headers)));
  });
  const idemCached = expressIdem({ store, replayCache: REPLAY_CACHE });
  app.post('/idem-cached', express.json(), idemCached, (req, res) => {
    res.status(201).json(noop(keyOf(req.headers)));
  });
  const idemMemory = expressIdem({ store: memoryStore });
  app.post('/idem-memory', express.json(), idemMemory, (req, res) => {
    res.status(201).json(noop(keyOf(req.headers)));
  });
  app.use(idem.onError);
  if (withPeers) await mountPeers(app);
  // Quiet error handler: peers signal 409/422 through next(error) with res.status set.
  app.use((error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    if (!res.headersSent) res.status(res.statusCode >= 400 ? res.statusCode : 500).json({ error: error.message });
  });
  return app;
}

/** The peers, each on its own route, with their documented setup. */
async function mountPeers(app: express.Express): Promise<void> {
  // express-idempotency (Ville de Montréal): middleware; the handler skips its work on a hit.
  const xi = await import('express-idempotency');
  const XiRedis = ((await import('express-idempotency-redis-adapter')) as unknown as { default: { default?: unknown } }).default;
  const RedisAdapter = (XiRedis.default ?? XiRedis) as new (o: unknown) => { connect(): Promise<void> };
  const xiHandler = (req: express.Request, res: express.Response) => {
    if (xi.getSharedIdempotencyService().isHit(req)) return;
    res.status(201).json(noop(keyOf(req.headers)));
  };
  app.post('/xi-memory', express.json(), xi.idempotency(), xiHandler);
  const xiAdapter = new RedisAdapter({ connectionConfig: { url: redisUrl } });
  await xiAdapter.connect();
  app.post('/xi-redis', express.json(), xi.idempotency({ dataAdapter: xiAdapter as never }), xiHandler);

  // @node-idempotency/core: onRequest before, onResponse after the handler.
  const { Idempotency, IdempotencyError } = await import('@node-idempotency/core');
  const { MemoryStorageAdapter } = await import('@node-idempotency/storage-adapter-memory');
  const { RedisStorageAdapter } = await import('@node-idempotency/storage-adapter-redis');
  const niRedisStorage = new RedisStorageAdapter({ url: redisUrl });
  await niRedisStorage.connect();
  for (const [route, storage] of [
    ['/ni-memory', new MemoryStorageAdapter()],
    ['/ni-redis', niRedisStorage],
  ] as const) {
    const ni = new Idempotency(storage, { cacheKeyPrefix: `${prefix}-ni` });
    app.post(route, express.json(), async (req, res) => {
      const params = { headers: req.headers as Record<string, unknown>, path: req.path, method: req.method, body: req.body as Record<string, unknown> };
      try {
        const cached = await ni.onRequest<{ ok: true }, unknown>(params);
        if (cached) {
          res.status(201).json(cached.body);
          return;
        }
      } catch (error) {
        const code = (error as InstanceType<typeof IdempotencyError>).code;
        res.status(String(code).includes('PROGRESS') ? 409 : 422).json({ error: String(code) });
        return;
      }
      const body = noop(keyOf(req.headers));
      await ni.onResponse(params, { body });
      res.status(201).json(body);
    });
  }

  // idem on the same Redis (RedisStore, its own connection, a prefix of this run).
  {
    const { createClient } = await import('@redis/client');
    const { RedisStore } = await import('../../src/redis/index.js');
    const idemRedis = createClient({ url: redisUrl });
    await idemRedis.connect();
    const idem = expressIdem({ store: new RedisStore({ client: idemRedis, prefix: `${prefix}-idem` }) });
    app.post('/idem-redis', express.json(), idem, (req, res) => {
      res.status(201).json(noop(keyOf(req.headers)));
    });
  }

  // Powertools for AWS Lambda: makeIdempotent over the Redis (cache) persistence layer.
  const { makeIdempotent, IdempotencyConfig, IdempotencyAlreadyInProgressError } = await import('@aws-lambda-powertools/idempotency');
  const { CachePersistenceLayer } = await import('@aws-lambda-powertools/idempotency/cache');
  const { createClient } = await import('@redis/client');
  const ptClient = createClient({ url: redisUrl });
  await ptClient.connect();
  const persistenceStore = new CachePersistenceLayer({ client: ptClient as never });
  const ptConfig = new IdempotencyConfig({ eventKeyJmesPath: 'key' });
  // Outside Lambda there is no invocation deadline; without one, Powertools writes no
  // in-progress expiry (and warns on every call). Give it a 60 s one, idem's default lease.
  ptConfig.registerLambdaContext({ getRemainingTimeInMillis: () => 60_000 } as never);
  const ptWork = makeIdempotent(async (event: { key: string; body: unknown }) => noop(event.key), {
    persistenceStore,
    config: ptConfig,
    keyPrefix: `${prefix}-pt`,
  });
  app.post('/pt-redis', express.json(), async (req, res) => {
    try {
      res.status(201).json(await ptWork({ key: keyOf(req.headers) ?? '', body: req.body }));
    } catch (error) {
      res.status(error instanceof IdempotencyAlreadyInProgressError ? 409 : 500).json({ error: (error as Error).name });
    }
  });
}

let url: string;
if (kind === 'hono') {
  const server = await new Promise<http.Server>((resolve) => {
    const s = serve({ fetch: honoApp().fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s as http.Server));
  });
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
} else {
  url = await listen(http.createServer(await expressApp(kind === 'peers')));
}
process.stdout.write(JSON.stringify({ url }) + '\n');
// The parent ends this process with a signal when done.
process.on('SIGTERM', () => {
  void pool.end().finally(() => process.exit(0));
});
