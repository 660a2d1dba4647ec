/**
 * Wait mode (docs/guides/wait-mode.md, protocol.md K17): a duplicate of a request still in
 * progress waits for the first one's result and gets its replay, instead of a 409 it must poll
 * on. On Redis (7+) through node-redis; the same option works with ioredis, Redis Cluster, the
 * memory store, and PostgreSQL/PGlite/Citus with `notify: true`.
 */
import { randomUUID } from 'node:crypto';
import { createClient } from '@redis/client';
import { Hono } from 'hono';
import { RedisStore } from 'idem/redis';
import { idempotency, type IdempotencyVariables } from 'idem/hono';

// #region setup
export async function createApp(redisUrl: string) {
  const redis = createClient({ url: redisUrl });
  await redis.connect();
  const store = new RedisStore({ client: redis, storeTimeoutMs: 2000 });
  const app = new Hono<{ Variables: IdempotencyVariables }>();
  app.post(
    '/v1/charges',
    // A duplicate waits up to 10 s for the first request (at most the lease, 60 s by default);
    // at most 1000 of them wait at once in this process, the others get the 409 at once.
    idempotency({ store, required: true, inProgress: { wait: 10_000, maxWaiters: 1000 } }),
    async (c) => {
      const { amount } = await c.req.json<{ amount: number }>();
      await new Promise((resolve) => setTimeout(resolve, 500)); // a slow payment provider
      return c.json({ id: `ch_${randomUUID()}`, amount }, 201);
    },
  );
  return { app, close: () => redis.destroy() };
}
// #endregion setup
