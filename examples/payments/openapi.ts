/**
 * The payments API's OpenAPI document, served at `GET /openapi.json`: the API's own operations
 * (the charge, its errors), with idem's contract merged in by one call to `withIdempotency`:
 * the required `Idempotency-Key` parameter, `Idempotent-Replayed` and `Idempotency-Key-Expires`
 * on the answers that may be replays, and every idem problem (400, 409, 422, 500, 503) as
 * `application/problem+json`. A client generated from it (openapi-typescript + openapi-fetch)
 * must send the key and sees the headers.
 */
// #region document
import { withIdempotency } from 'idem/openapi';

const charge = {
  type: 'object',
  required: ['id', 'object', 'amount', 'currency', 'customer', 'status', 'psp_charge_id', 'metadata', 'created'],
  properties: {
    id: { type: 'string' },
    object: { type: 'string', enum: ['charge'] },
    amount: { type: 'integer' },
    currency: { type: 'string' },
    customer: { type: 'string' },
    status: { type: 'string', enum: ['succeeded'] },
    psp_charge_id: { type: 'string' },
    metadata: { type: 'object', additionalProperties: { type: 'string' } },
    created: { type: 'integer' },
  },
};

/** The API's own description: what it does, without anything idem adds. */
const api = {
  openapi: '3.1.0',
  info: { title: 'idem example payments API', version: '1.0.0' },
  components: {
    securitySchemes: { apiKey: { type: 'http', scheme: 'bearer' } },
    schemas: { Charge: charge },
  },
  security: [{ apiKey: [] }],
  paths: {
    '/v1/charges': {
      post: {
        operationId: 'createCharge',
        requestBody: {
          required: true,
          content: {
            'application/json': {
              schema: {
                type: 'object',
                required: ['amount', 'currency', 'customer'],
                properties: {
                  amount: { type: 'integer', minimum: 1 },
                  currency: { type: 'string', pattern: '^[a-z]{3}$' },
                  customer: { type: 'string' },
                  description: { type: 'string' },
                  metadata: { type: 'object', additionalProperties: { type: 'string' } },
                },
              },
            },
          },
        },
        responses: {
          '201': {
            description: 'The charge, created (or, with Idempotent-Replayed, as first created).',
            content: { 'application/json': { schema: { $ref: '#/components/schemas/Charge' } } },
          },
          // The API's own 400 and 401 (problem+json, the same shape as idem's): idem keeps an
          // operation's own answer to a status and adds its problems for the others.
          '400': {
            description: 'The charge request is invalid, or its Idempotency-Key is.',
            content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/IdemProblem' } } },
          },
          '401': { description: 'No API key.', content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/IdemProblem' } } } },
        },
      },
    },
    '/v1/charges/{id}': {
      get: {
        operationId: 'getCharge',
        parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }],
        responses: { '200': { description: 'The charge.', content: { 'application/json': { schema: { $ref: '#/components/schemas/Charge' } } } } },
      },
    },
  },
};

/** The document served: the API's, with idem's contract merged in (the same options as the route's). */
export const paymentsOpenApi = withIdempotency(api, { required: true, stripe: true, expiresHeader: true });
// #endregion document
