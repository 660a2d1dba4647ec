/**
 * The work of the consumer examples (examples/amqp/consumer.ts, examples/nats/consumer.ts):
 * one `order-placed` message creates one invoice. The invoice row commits together with idem's
 * recovery point (an atomic phase); returning from the handler finishes the key, and the
 * message is acked. A redelivery, or a second copy with the same message id, is acked as a
 * duplicate without running the handler; a message that reuses an id with another body is
 * dead-lettered (`mismatch`).
 */
// #region handler
import type { MessageContext } from 'idem/consumer';
import type { Queryable, SqlClient } from 'idem/postgres';

export interface OrderPlaced {
  orderId: string;
  amount: number;
}

/** The handler: `invoices` is the invoices table. */
export async function createInvoice(ctx: MessageContext<Queryable>, invoices = 'invoices'): Promise<void> {
  const order = JSON.parse(new TextDecoder().decode(ctx.message.body)) as OrderPlaced;
  await ctx.phase('invoice', async (tx) => {
    await tx.query(`INSERT INTO "${invoices}" (order_id, amount) VALUES ($1, $2)`, [order.orderId, order.amount]);
  });
}
// #endregion handler

export async function migrateInvoices(db: SqlClient & Queryable, invoices = 'invoices'): Promise<void> {
  await db.query(`CREATE TABLE IF NOT EXISTS "${invoices}" (id serial PRIMARY KEY, order_id text NOT NULL, amount integer NOT NULL)`);
}
