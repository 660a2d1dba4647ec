/**
 * The Worker of the Cloudflare crash drill (test/cloudflare-crash.test.ts): `POST /d1/run` on
 * `D1Store`, `POST /do/run` on `DurableObjectStore`, each two phases, every effect a row of the
 * D1 table `drill` (in the phase's batch on D1; written on its own before the phase records on
 * Durable Objects, whose phases share no transaction). With `x-crash: 1` the handler writes the
 * row `hanging` after its first phase and never returns: the test kills workerd there.
 */
import { Hono, type MiddlewareHandler } from 'hono';
import { D1Store, type D1DatabaseLike, type D1Tx, DurableObjectStore, type DurableObjectNamespaceLike } from '../../src/cloudflare/index.js';
import { idempotency, type IdempotencyVariables } from '../../src/hono/index.js';

export { IdemKeyObject } from '../../src/cloudflare/object.js';

interface Env {
  DB: D1DatabaseLike;
  IDEM: DurableObjectNamespaceLike;
}

/** The drill's lease: short, so the retry after the crash takes over soon. */
const DRILL_LEASE_MS = 1000;

const app = new Hono<{ Bindings: Env; Variables: IdempotencyVariables<D1Tx | undefined> }>();
const middlewares = new Map<string, Promise<MiddlewareHandler>>();

async function middleware(kind: string, env: Env): Promise<MiddlewareHandler> {
  await env.DB.prepare('CREATE TABLE IF NOT EXISTS drill (id INTEGER PRIMARY KEY AUTOINCREMENT, store TEXT, key TEXT, note TEXT)').run();
  const store = kind === 'd1' ? new D1Store({ database: env.DB }) : new DurableObjectStore({ namespace: env.IDEM });
  if (store instanceof D1Store) await store.migrate();
  return idempotency({ store: store as never, required: true, scope: () => 'drill', leaseMs: DRILL_LEASE_MS });
}

app.use('/:store/run', async (c, next) => {
  const kind = c.req.param('store');
  let made = middlewares.get(kind);
  if (!made) {
    made = middleware(kind, c.env);
    middlewares.set(kind, made);
  }
  return (await made)(c, next);
});

app.post('/:store/run', async (c) => {
  const kind = c.req.param('store');
  const key = c.req.header('idempotency-key');
  const idem = c.get('idem')!;
  const note = (n: string) => c.env.DB.prepare('INSERT INTO drill (store, key, note) VALUES (?, ?, ?)').bind(kind, key, n);
  const effect = (n: string) => async (tx: D1Tx | undefined) => {
    if (kind === 'd1') tx!.write(note(n));
    else await note(n).run();
    return n;
  };
  await idem.phase('first', effect('first'));
  if (c.req.header('x-crash')) {
    await note('hanging').run();
    await new Promise(() => undefined); // killed here
  }
  await idem.phase('second', effect('second'));
  return c.json({ done: true }, 201);
});

export default app;
