/**
 * Valkey GLIDE (docs/guides/valkey-glide.md, protocol.md K55): `RedisStore` on a
 * `GlideClient` (`@valkey/valkey-glide`), with wait mode: a duplicate of a request still in
 * progress waits for the first one's result and gets its replay. A `GlideClusterClient` works
 * the same (its waiters are woken by sharded pub/sub; a standalone `GlideClient` polls the key).
 *
 * Run: `VALKEY_HOST=127.0.0.1 VALKEY_PORT=6379 npx tsx examples/valkey-glide/app.ts`
 */
import { randomUUID } from 'node:crypto';
import { serve } from '@hono/node-server';
import { GlideClient } from '@valkey/valkey-glide';
import { Hono } from 'hono';
import { idempotency, type IdempotencyVariables } from 'idem/hono';
import { RedisStore } from 'idem/redis';
import { isMain } from '../shared/db.js';

// #region setup
export async function createApp(host: string, port: number) {
  // GLIDE's own request timeout is 250 ms by default: give it room above idem's storeTimeoutMs.
  const client = await GlideClient.createClient({ addresses: [{ host, port }], requestTimeout: 3000 });
  const store = new RedisStore({ client, storeTimeoutMs: 2000 });
  const app = new Hono<{ Variables: IdempotencyVariables }>();
  app.post('/v1/charges', idempotency({ store, required: true, inProgress: { wait: 10_000 } }), async (c) => {
    const { amount } = await c.req.json<{ amount: number }>();
    await new Promise((resolve) => setTimeout(resolve, 500)); // a slow payment provider
    return c.json({ id: `ch_${randomUUID()}`, amount }, 201);
  });
  return { app, close: () => client.close() };
}
// #endregion setup

if (isMain(import.meta.url)) {
  const { app } = await createApp(process.env.VALKEY_HOST ?? '127.0.0.1', Number(process.env.VALKEY_PORT ?? 6379));
  serve({ fetch: app.fetch, port: Number(process.env.PORT ?? 3000) }, (info) => console.log(`listening on http://localhost:${info.port}`));
}
