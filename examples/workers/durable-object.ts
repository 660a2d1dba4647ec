/**
 * Cloudflare Workers with a real claim: a Hono app whose idempotency keys live in Durable
 * Objects (`idem/cloudflare`), one object per key, so every isolate and every colo that gets a
 * retry meets the same claim. `POST /charges` runs once per Idempotency-Key; a retry gets the
 * first 201 back byte for byte (`Idempotent-Replayed: true`), the same key with another body a
 * 422, a duplicate while the first runs a 409.
 *
 * Bind the object in wrangler.jsonc (docs/stores/durable-objects.md) and export its class from
 * the Worker's main module, as below. Needs the `nodejs_compat` compatibility flag (idem hashes
 * with node:crypto). Run by test/durable-object-store.test.ts and test/runtimes/workerd.mjs
 * (Miniflare).
 */
import { Hono, type MiddlewareHandler } from 'hono';
import { idempotency, type IdempotencyVariables } from 'idem/hono';
import { DurableObjectStore, type DurableObjectNamespaceLike } from 'idem/cloudflare';

// The Durable Object class the `IDEM` binding names: exported from the main module.
export { IdemKeyObject } from 'idem/cloudflare/object';

interface Env {
  IDEM: DurableObjectNamespaceLike;
}

/** The charges this isolate made: the effect the test counts (a real app calls its PSP). */
let charges = 0;

const app = new Hono<{ Bindings: Env; Variables: IdempotencyVariables }>();

// #region middleware
// The binding arrives with the first request; one middleware (and store) per isolate.
let idem: MiddlewareHandler | undefined;
app.use('/charges', (c, next) => {
  idem ??= idempotency({ store: new DurableObjectStore({ namespace: c.env.IDEM }), required: true });
  return idem(c, next);
});
// #endregion middleware

app.post('/charges', async (c) => {
  const { amount } = await c.req.json<{ amount: number }>();
  // A call outside any transaction, with a key derived from the claim (protocol.md K11): the
  // PSP drops a repeat of it after a crash here, and the result is recorded in the key's object.
  const charge = await c.get('idem')!.call('charge', async (derivedKey) => {
    charges++;
    await new Promise((r) => setTimeout(r, 20)); // the PSP's round trip: duplicates meet the claim
    return { id: `ch_${charges}`, amount, psp_key: derivedKey.slice(0, 12) };
  });
  return c.json(charge, 201);
});
app.get('/charges/count', (c) => c.json({ charges }));

export default app;
