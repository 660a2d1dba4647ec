/**
 * Cloudflare Workers: a Hono app with idem's middleware, `export default app` as the Worker.
 * `POST /charges` runs once per Idempotency-Key; a retry gets the first 201 back byte for byte
 * (`Idempotent-Replayed: true`), the same key with another body a 422. Needs the
 * `nodejs_compat` compatibility flag (idem hashes with node:crypto).
 *
 * The memory store lives in one isolate: it is what this example and CI's workerd check
 * (test/runtimes/workerd.mjs, Miniflare) use, not a production store for Workers, where
 * isolates come and go. Run: bundle it (wrangler or esbuild) and serve it with Miniflare or
 * `wrangler dev`.
 */
import { Hono } from 'hono';
import { idempotency, type IdempotencyVariables } from 'idem/hono';
import { MemoryStore } from 'idem/memory';

const store = new MemoryStore();
let runs = 0;

const app = new Hono<{ Variables: IdempotencyVariables }>();
app.post('/charges', idempotency({ store, required: true }), async (c) => {
  const idem = c.get('idem')!;
  const { amount } = await c.req.json<{ amount: number }>();
  const charge = await idem.phase('charge', async () => {
    runs++; // the side effect: once per key
    await new Promise((r) => setTimeout(r, 20)); // long enough for concurrent duplicates to meet it
    return { id: runs, amount };
  });
  return c.json(charge, 201);
});
app.get('/runs', (c) => c.json({ runs }));

export default app;
