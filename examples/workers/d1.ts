/**
 * Cloudflare Workers on D1: a Hono app whose idempotency keys live in a D1 table
 * (`D1Store`, `idem/cloudflare`), and whose charge row is written in the same D1 `batch()` as
 * idem's recovery point: both or neither. `POST /charges` runs once per Idempotency-Key; a
 * retry gets the first 201 back byte for byte (`Idempotent-Replayed: true`), the same key with
 * another body a 422, a duplicate while the first runs a 409.
 *
 * Bind the database in wrangler.jsonc (`d1_databases`, docs/guides/d1.md). Needs the
 * `nodejs_compat` compatibility flag (idem hashes with node:crypto). Run by
 * test/d1-store.test.ts (Miniflare).
 */
import { Hono, type MiddlewareHandler } from 'hono';
import { idempotency, type IdempotencyVariables } from 'idem/hono';
import { D1Store, type D1DatabaseLike, type D1Tx } from 'idem/cloudflare';

interface Env {
  DB: D1DatabaseLike;
}

const app = new Hono<{ Bindings: Env; Variables: IdempotencyVariables<D1Tx> }>();

// #region middleware
// The binding arrives with the first request; one store (and middleware) per isolate. The
// tables are made once per isolate here for the example; a deployment runs `migrate()` (or the
// same DDL as a wrangler D1 migration) before it takes traffic.
let store: D1Store | undefined;
let ready: Promise<unknown> | undefined;
app.use('*', async (c, next) => {
  store ??= new D1Store({ database: c.env.DB });
  ready ??= store
    .migrate()
    .then(() => c.env.DB.prepare('CREATE TABLE IF NOT EXISTS charges (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)').run())
    .catch((error: unknown) => {
      ready = undefined; // the next request tries again
      throw error;
    });
  await ready;
  return next();
});
let idem: MiddlewareHandler | undefined;
app.use('/charges', (c, next) => {
  idem ??= idempotency({ store: store!, required: true });
  return idem(c, next);
});
// #endregion middleware

// #region handler
app.post('/charges', async (c) => {
  const { amount } = await c.req.json<{ amount: number }>();
  const charge = await c.get('idem')!.phase('charge_created', async (tx) => {
    const id = `ch_${crypto.randomUUID()}`;
    // Runs in ONE batch with the recovery point, behind the token's guard: both or neither.
    tx.write(tx.db.prepare('INSERT INTO charges (id, amount) VALUES (?, ?)').bind(id, amount));
    await new Promise((r) => setTimeout(r, 20)); // the work's time: duplicates meet the claim
    return { id, amount };
  });
  return c.json(charge, 201);
});
// #endregion handler

app.get('/charges/count', async (c) => {
  const row = await c.env.DB.prepare('SELECT COUNT(*) AS n FROM charges').first<{ n: number }>();
  return c.json({ charges: row?.n ?? 0 });
});

export default app;
