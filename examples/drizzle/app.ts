/**
 * The example payments charge (examples/payments) written with Drizzle: `POST /v1/charges`
 * protected by idem, in three steps whose local writes go through Drizzle's own transaction:
 *   1. `charge_created`: insert the charge with `tx.insert(charges)`, committed with the
 *      recovery point (protocol.md K4);
 *   2. `psp_charged`: call the payment provider with a key derived from the client's key and
 *      record its answer;
 *   3. finish: `tx.update(charges)` to succeeded and store the 201 in the same transaction.
 * A retry replays the first response byte for byte; a crash resumes from the last committed
 * step; one PSP charge per idempotency key.
 */
import { randomUUID } from 'node:crypto';
import { asc, eq } from 'drizzle-orm';
import { Hono } from 'hono';
import { problemResponse, type TxOf } from 'idem';
import { drizzle } from 'idem/drizzle';
import { idempotency, type IdempotencyVariables } from 'idem/hono';
import { PostgresStore } from 'idem/postgres';
import { parseChargeRequest } from '../payments/validate.js';
import type { FakePsp } from './psp.js';
import { charges, type Database } from './schema.js';

export interface DrizzleAppOptions {
  /** The Drizzle database (node-postgres, postgres.js or PGlite) with the example's schema. */
  db: Database;
  psp: FakePsp;
  /** idem lease in ms. @default 60_000 */
  leaseMs?: number;
}

/** Builds the app on a migrated database (`PostgresStore#migrate` and migrations/, see server.ts). */
export function createDrizzleApp({ db, psp, leaseMs }: DrizzleAppOptions) {
  // `tx` in phases is Drizzle's transaction on `db`, typed from it: no casts below.
  const store = new PostgresStore({ client: drizzle(db) });
  const app = new Hono<{ Variables: IdempotencyVariables<TxOf<typeof store>> }>();

  app.post('/v1/charges', idempotency({ store, required: true, leaseMs }), async (c) => {
    const idem = c.get('idem')!;
    const parsed = parseChargeRequest(c.req.header('content-type'), new Uint8Array(await c.req.arrayBuffer()));
    // Rejected before any phase: idem frees the key (400 is a discard status), so it can be reused.
    if (!parsed.ok) return problem(400, 'Invalid charge request', parsed.detail);
    const req = parsed.value;

    const charge = await idem.phase('charge_created', async (tx) => {
      const [row] = await tx
        .insert(charges)
        .values({
          id: 'ch_' + randomUUID().replaceAll('-', ''),
          idempotencyKey: idem.key,
          amount: req.amount,
          currency: req.currency,
          customer: req.customer,
          metadata: req.metadata,
        })
        .returning({ id: charges.id, createdAt: charges.createdAt });
      return { id: row!.id, created: Math.floor(row!.createdAt.getTime() / 1000) };
    });

    // Recorded as JSON: keep to what the response needs.
    const pspCharge = await idem.call('psp_charged', async (derivedKey) => {
      const { id } = await psp.charge({ idempotencyKey: derivedKey, amount: req.amount, currency: req.currency, customer: req.customer });
      return { id };
    });

    return idem.respond(async (tx) => {
      await tx.update(charges).set({ status: 'succeeded', pspChargeId: pspCharge.id }).where(eq(charges.id, charge.id));
      const { amount, currency, customer, metadata } = req;
      const body = {
        id: charge.id,
        object: 'charge',
        amount,
        currency,
        customer,
        status: 'succeeded',
        psp_charge_id: pspCharge.id,
        metadata,
        created: charge.created,
      };
      return c.json(body, 201, { location: `/v1/charges/${charge.id}` });
    });
  });

  // The local ledger of one customer (`?customer=`), so tests and humans can count charges.
  app.get('/v1/charges', async (c) => {
    const rows = await db
      .select({ id: charges.id, status: charges.status, idempotencyKey: charges.idempotencyKey, pspChargeId: charges.pspChargeId })
      .from(charges)
      .where(eq(charges.customer, c.req.query('customer') ?? ''))
      .orderBy(asc(charges.createdAt), asc(charges.id));
    return c.json({ data: rows });
  });

  // The provider's own ledger, open to anyone, so tests and humans can count PSP charges.
  app.get('/v1/psp/charges', async (c) => c.json({ data: await psp.list() }));
  app.get('/healthz', (c) => c.json({ ok: true }));
  app.notFound(() => problem(404, 'Not found', 'No such route.'));
  app.onError((error) => {
    console.error('drizzle example: unhandled error', error);
    return problem(500, 'Internal error', 'The server failed; retry with the same Idempotency-Key.');
  });
  return { app, store };
}

function problem(status: number, title: string, detail: string): Response {
  return problemResponse({ type: 'about:blank', title, status, detail });
}
