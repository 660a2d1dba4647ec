// The README's Next.js example: a charge created once per Idempotency-Key.
import { randomUUID } from 'node:crypto';
import { withIdempotency } from 'idem/next';
import type { Queryable } from 'idem/postgres';
import { store } from '../../../lib/store.js';

export const POST = withIdempotency<Queryable>({ store, required: true }, async (request, _ctx, idem) => {
  const { amount } = (await request.json()) as { amount?: unknown };
  if (!Number.isInteger(amount)) return Response.json({ error: 'amount must be an integer' }, { status: 400 }); // not stored: fix and retry
  const charge = await idem!.phase('charge_created', async (tx) => {
    await tx.query('SELECT 1'); // your INSERT, in the same transaction as the recovery point
    return { id: `ch_${randomUUID()}`, amount };
  });
  return Response.json(charge, { status: 201, headers: { location: `/api/charges/${charge.id}` } });
});
