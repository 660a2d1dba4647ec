/**
 * Type-level tests (checked by `npm run typecheck`, never run): idem's Express middleware in a
 * route's handler chain leaves the route's types as the app declared them (issue 25): `req.body`
 * stays `any` (Express's default) or the declared body type, and `res.locals` keeps its declared
 * shape, so the README's `insertOrder(tx, req.body)` compiles under `--strict`.
 */
import express from 'express';
import type { PostgresStore, Queryable } from '../src/postgres/index.js';
import { idempotency } from '../src/express/index.js';

declare const store: PostgresStore;
interface Order {
  sku: string;
  quantity: number;
}
declare function insertOrder(tx: Queryable, order: Order): Promise<{ id: string }>;

const app = express();
const idem = idempotency<Queryable>({ store, required: true });

// The README's route: req.body is Express's default `any`.
app.post('/v1/orders', express.json(), idem, async (req, res) => {
  const order = await idem.context(res)!.phase('order_created', (tx) => insertOrder(tx, req.body));
  res.status(201).json(order);
});

// A declared body type reaches the handler through idem.
app.post<'/v2/orders', Record<string, never>, { id: string }, Order>('/v2/orders', express.json(), idem, async (req, res) => {
  const quantity: number = req.body.quantity;
  // @ts-expect-error the declared body has no `price`: idem does not widen it to any
  void req.body.price;
  res.status(201).json(await idem.context(res)!.phase('order_created', (tx) => insertOrder(tx, { ...req.body, quantity })));
});

// Typed locals (set by an earlier middleware) keep their shape through idem.
app.post<'/v3/orders', Record<string, never>, unknown, Order, Record<string, never>, { tenant: string }>(
  '/v3/orders',
  express.json(),
  idem,
  async (req, res) => {
    const tenant: string = res.locals.tenant;
    res.status(201).json({ tenant, ...(await idem.context(res)!.phase('order_created', (tx) => insertOrder(tx, req.body))) });
  },
);

// The error middleware mounts after the routes as before.
app.use(idem.onError);
