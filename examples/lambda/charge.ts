/**
 * The work of the Lambda examples (examples/lambda/handler.ts, examples/lambda/middy.ts):
 * ordinary Lambda code that validates the body, then inserts the charge in one atomic phase
 * (the row commits together with idem's recovery point) and returns `{ statusCode, headers, body }`.
 */
// #region charge
import { randomUUID } from 'node:crypto';
import type { IdempotencyContext, LambdaHttpEvent } from 'idem/lambda';
import type { Queryable, SqlClient } from 'idem/postgres';

export interface ChargeResult {
  statusCode: number;
  headers: Record<string, string>;
  body: string;
}

const json = (statusCode: number, body: unknown, headers: Record<string, string> = {}): ChargeResult => ({
  statusCode,
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(body),
});

/** Validates, then one atomic phase. `charges` is the charges table. */
export async function createCharge(event: LambdaHttpEvent, idem: IdempotencyContext<Queryable>, charges = 'charges'): Promise<ChargeResult> {
  const raw = event.body ? Buffer.from(event.body, event.isBase64Encoded ? 'base64' : 'utf8').toString('utf8') : '{}';
  const { amount } = JSON.parse(raw) as { amount?: unknown };
  // A 4xx before any phase is not stored: the client can fix the body and retry with the same key.
  if (!Number.isInteger(amount)) return json(400, { error: 'amount must be an integer' });
  const charge = await idem.phase('charge_created', async (tx) => {
    const id = `ch_${randomUUID()}`;
    await tx.query(`INSERT INTO "${charges}" (id, amount) VALUES ($1, $2)`, [id, amount]);
    return { id, amount };
  });
  return json(201, charge, { location: `/v1/charges/${charge.id}` });
}
// #endregion charge

/** The charges table (run at deploy time, with the store's `migrate()`, not on every cold start). */
export async function migrateCharges(db: SqlClient & Queryable, charges = 'charges'): Promise<void> {
  await db.query(`CREATE TABLE IF NOT EXISTS "${charges}" (id text PRIMARY KEY, amount integer NOT NULL)`);
}
