/**
 * A typed client of the example payments API, generated from its OpenAPI document
 * (openapi.ts → openapi-types.ts by openapi-typescript, `npm run openapi:types`) and called
 * with openapi-fetch. The types make the `Idempotency-Key` header required, and list the
 * replay and expiry headers and idem's problems on each answer.
 */
// #region client
import { randomUUID } from 'node:crypto';
import createClient from 'openapi-fetch';
import type { paths } from './openapi-types.js';

/** Headers a 201 may carry, as the generated types name them. */
export type ChargeCreatedHeaders = paths['/v1/charges']['post']['responses']['201']['headers'];

export function paymentsClient(baseUrl: string, apiKey: string) {
  const client = createClient<paths>({ baseUrl, headers: { authorization: `Bearer ${apiKey}` } });
  return {
    /** Creates a charge under `key` (one per intent: reuse it on every retry of this charge). */
    async createCharge(body: { amount: number; currency: string; customer: string }, key: string = randomUUID()) {
      const { data, error, response } = await client.POST('/v1/charges', { params: { header: { 'Idempotency-Key': key } }, body });
      return {
        key,
        status: response.status,
        charge: data,
        problem: error,
        replayed: response.headers.get('Idempotent-Replayed' satisfies keyof ChargeCreatedHeaders) === 'true',
        keyExpires: response.headers.get('Idempotency-Key-Expires' satisfies keyof ChargeCreatedHeaders),
      };
    },
  };
}
// #endregion client
