/**
 * HTTP options of docs/guides/options.md on a Hono route: the replay cache, and a JSON-RPC
 * client's envelope `id` left out of the fingerprint. Type-checked with the examples; the
 * options themselves are run by the engine and adapter suites.
 */
import { Hono } from 'hono';
import { ReplayCache } from 'idem';
import { idempotency } from 'idem/hono';
import type { PostgresStore } from 'idem/postgres';

export function routes(store: PostgresStore, handler: () => Response) {
  const app = new Hono();
  // #region replay-cache
  const replayCache = new ReplayCache({ maxBytes: 64 * 1024 * 1024 });
  app.post('/v1/charges', idempotency({ store, replayCache }), handler);
  // #endregion replay-cache

  // #region json-rpc
  app.post('/rpc', idempotency({ store, fingerprintIgnore: ['/id'] }), handler);
  // or, for full control (e.g. a batch), fingerprint a projection of the parsed body:
  app.post(
    '/rpc/v2',
    idempotency({ store, fingerprintProjection: (rpc) => ({ method: (rpc as { method?: unknown }).method, params: (rpc as { params?: unknown }).params }) }),
    handler,
  );
  // #endregion json-rpc
  return app;
}
