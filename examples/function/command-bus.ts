/**
 * A queue-less command bus: commands dispatched in process (from an HTTP handler, a CLI, a
 * workflow) by their id, each handler idempotent per command id. A client that resends a command
 * after a timeout gets the first result; the same id with another payload is refused.
 * Run by test/function-examples.test.ts.
 */
import type { PostgresStore, Queryable } from 'idem/postgres';
import { idempotent, type IdempotentFunction } from 'idem/function';

// #region bus
export type Command = { id: string; type: 'PlaceOrder'; customer: string; amountCents: number } | { id: string; type: 'CancelOrder'; orderId: number };

type Result<C extends Command> = C extends { type: 'PlaceOrder' } ? { orderId: number } : { cancelled: boolean };

export function commandBus(store: PostgresStore) {
  const handlers: { [T in Command['type']]: IdempotentFunction<[Extract<Command, { type: T }>], Result<Extract<Command, { type: T }>>> } = {
    PlaceOrder: idempotent(
      async (ctx, cmd: Extract<Command, { type: 'PlaceOrder' }>) =>
        ctx.complete(async (tx: Queryable) => {
          const { rows } = await tx.query('INSERT INTO orders (customer, amount_cents) VALUES ($1, $2) RETURNING id', [cmd.customer, cmd.amountCents]);
          return { orderId: Number(rows[0]!.id) };
        }),
      { store, name: 'cmd.PlaceOrder', key: (cmd) => cmd.id },
    ),
    CancelOrder: idempotent(
      async (ctx, cmd: Extract<Command, { type: 'CancelOrder' }>) =>
        ctx.complete(async (tx: Queryable) => {
          const { rowCount } = await tx.query("UPDATE orders SET status = 'cancelled' WHERE id = $1 AND status = 'open'", [cmd.orderId]);
          return { cancelled: rowCount === 1 };
        }),
      { store, name: 'cmd.CancelOrder', key: (cmd) => cmd.id },
    ),
  };
  return {
    dispatch<C extends Command>(command: C): Promise<Result<C>> {
      const handler = handlers[command.type] as unknown as (c: C) => Promise<Result<C>>;
      return handler(command);
    },
  };
}
// #endregion bus

export const BUS_SCHEMA = `
  CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, customer text NOT NULL, amount_cents int NOT NULL, status text NOT NULL DEFAULT 'open');
`;
