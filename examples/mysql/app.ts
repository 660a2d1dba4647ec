/**
 * A Hono API on MySQL or MariaDB: `POST /v1/orders` with an `Idempotency-Key`, the order row
 * and idem's recovery point in one transaction of the pool's own connection, the payment
 * through a derived key, and the finish with the last write.
 *
 * Run: MYSQL_URL=mysql://root@127.0.0.1:3306/test npx tsx examples/mysql/app.ts
 */
// #region app
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import mysql, { type PoolConnection, type ResultSetHeader } from 'mysql2/promise';
import { idempotency, type IdempotencyVariables } from 'idem/hono';
import { MySqlStore } from 'idem/mysql';

const pool = mysql.createPool({
  uri: process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test',
  connectTimeout: 2000, // a silent server fails fast instead of hanging
  connectionLimit: 10,
});
const store = new MySqlStore({ client: pool, storeTimeoutMs: 2000 });
await store.migrate(); // idempotent, safe from several hosts
await pool.query('CREATE TABLE IF NOT EXISTS orders (id INT AUTO_INCREMENT PRIMARY KEY, total INT NOT NULL, payment_id VARCHAR(64))');

/** A payment provider that deduplicates by idempotency key, as real ones do. */
const psp = {
  charges: new Map<string, string>(),
  async charge(input: { amount: number; idempotencyKey: string }) {
    const id = this.charges.get(input.idempotencyKey) ?? `ch_${this.charges.size + 1}`;
    this.charges.set(input.idempotencyKey, id);
    return { id };
  },
};

export const app = new Hono<{ Variables: IdempotencyVariables<PoolConnection> }>();
app.post('/v1/orders', idempotency({ store, required: true }), async (c) => {
  const idem = c.get('idem')!;
  const body = (await c.req.json()) as { total: number };
  // Atomic phase: the order row commits together with the recovery point, on mysql2's own connection.
  const order = await idem.phase('order_created', async (tx) => {
    const [result] = await tx.query<ResultSetHeader>('INSERT INTO orders (total) VALUES (?)', [body.total]);
    return { id: result.insertId };
  });
  // External call with a derived key: the same on every retry of this claim.
  const payment = await idem.call('payment', (derivedKey) => psp.charge({ amount: body.total, idempotencyKey: derivedKey }));
  // Finish in the same transaction as the last write.
  return idem.respond(async (tx) => {
    await tx.query('UPDATE orders SET payment_id = ? WHERE id = ?', [payment.id, order.id]);
    return c.json({ id: order.id, payment: payment.id }, 201);
  });
});
// #endregion app

if (process.argv[1]?.endsWith('app.ts')) {
  serve({ fetch: app.fetch, port: Number(process.env.PORT ?? 3000) }, (info) => console.log(`listening on :${info.port}`));
}
