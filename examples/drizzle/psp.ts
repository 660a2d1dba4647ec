/**
 * A fake payment service provider, in Drizzle: the same idempotency key always yields the same
 * charge (as Stripe's or Adyen's do), so a merchant retrying an in-flight call with a key
 * derived from its client's never charges twice. It writes on its own (autocommit), as a
 * remote system would; examples/payments/psp.ts has the version with injected failures.
 */
import { randomUUID } from 'node:crypto';
import { asc, eq } from 'drizzle-orm';
import { type Database, pspCharges } from './schema.js';

export type PspCharge = typeof pspCharges.$inferSelect;

export class FakePsp {
  /** @param latencyMs each call's latency in ms */
  constructor(
    private readonly db: Database,
    readonly latencyMs = 50,
  ) {}

  /** Creates (or, for a known idempotency key, returns) a charge. */
  async charge(input: { idempotencyKey: string; amount: number; currency: string; customer: string }): Promise<PspCharge> {
    await sleep(this.latencyMs);
    await this.db
      .insert(pspCharges)
      .values({ id: 'py_' + randomUUID().replaceAll('-', ''), ...input })
      .onConflictDoNothing({ target: pspCharges.idempotencyKey });
    const [charge] = await this.db.select().from(pspCharges).where(eq(pspCharges.idempotencyKey, input.idempotencyKey));
    return charge!;
  }

  /** Every charge the PSP ever made, oldest first. */
  list(): Promise<PspCharge[]> {
    return this.db.select().from(pspCharges).orderBy(asc(pspCharges.createdAt), asc(pspCharges.id));
  }
}

function sleep(ms: number): Promise<void> {
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : Promise.resolve();
}
