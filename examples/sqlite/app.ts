/**
 * A Hono API on SQLite (`idem/sqlite` on `node:sqlite`, nothing to install but idem and Hono):
 * `POST /v1/orders` with an `Idempotency-Key`, the order row and idem's recovery point in one
 * transaction of the file (`BEGIN IMMEDIATE` on your connection), the payment through a derived
 * key, and the finish with the last write. Every process on the host that opens the same file
 * shares the keys.
 *
 * Run: `npx tsx examples/sqlite/app.ts` (the file is `SQLITE_FILE`, default `app.db`), then
 * `curl -i -X POST localhost:3000/v1/orders -H 'Idempotency-Key: k1' -H 'content-type: application/json' -d '{"total":1200}'`.
 */
// #region app
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { DatabaseSync } from 'node:sqlite';
import { idempotency, type IdempotencyVariables } from 'idem/hono';
import { SqliteStore } from 'idem/sqlite';

export async function createApp(file: string) {
  const db = new DatabaseSync(file);
  // busyTimeoutMs: how long a write waits for another process's lock on the file before a 503.
  const store = new SqliteStore({ client: db, busyTimeoutMs: 5000 });
  await store.migrate(); // WAL on, tables if missing; safe from several processes
  db.exec('CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY AUTOINCREMENT, total INTEGER NOT NULL, payment_id TEXT)');

  /** A payment provider that deduplicates by idempotency key, as real ones do. */
  const psp = {
    charges: new Map<string, string>(),
    async charge(input: { amount: number; idempotencyKey: string }) {
      const id = this.charges.get(input.idempotencyKey) ?? `ch_${this.charges.size + 1}`;
      this.charges.set(input.idempotencyKey, id);
      return { id };
    },
  };

  // A phase's tx is the DatabaseSync itself, inside the phase's transaction.
  const app = new Hono<{ Variables: IdempotencyVariables<DatabaseSync> }>();
  app.post('/v1/orders', idempotency({ store, required: true, inProgress: { wait: 10_000 } }), async (c) => {
    const idem = c.get('idem')!;
    const body = (await c.req.json()) as { total: number };
    // Atomic phase: the order row commits together with the recovery point.
    const order = await idem.phase('order_created', async (tx) => {
      const [row] = tx.prepare('INSERT INTO orders (total) VALUES (?) RETURNING id').all(body.total) as Array<{ id: number }>;
      return { id: row!.id };
    });
    // External call with a derived key: the same on every retry of this claim.
    const payment = await idem.call('payment', (derivedKey) => psp.charge({ amount: body.total, idempotencyKey: derivedKey }));
    // Finish in the same transaction as the last write.
    return idem.respond(async (tx) => {
      tx.prepare('UPDATE orders SET payment_id = ? WHERE id = ?').run(payment.id, order.id);
      return c.json({ id: order.id, payment: payment.id }, 201);
    });
  });
  return { app, db, store };
}
// #endregion app

if (process.argv[1]?.endsWith('app.ts')) {
  const { app } = await createApp(process.env.SQLITE_FILE ?? 'app.db');
  serve({ fetch: app.fetch, port: Number(process.env.PORT ?? 3000) }, (info) => console.log(`listening on :${info.port}`));
}
