/**
 * idem/openapi: the components and `withIdempotency`, checked by a maintained validator
 * (@readme/openapi-parser) on OpenAPI 3.0 and 3.1; and the example payments API serving its
 * document over a real socket, with a client generated from it (openapi-typescript types,
 * openapi-fetch calls) that must send the key and sees the replay and expiry headers.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { PGlite } from '@electric-sql/pglite';
import { pglite } from './helpers/pglite.js';
import { serve } from '@hono/node-server';
import { validate } from '@readme/openapi-parser';
import createClient from 'openapi-fetch';
import { createPaymentsApp, migrate } from '../examples/payments/app.js';
import { type ChargeCreatedHeaders, paymentsClient } from '../examples/payments/client.js';
import { paymentsOpenApi } from '../examples/payments/openapi.js';
import type { paths } from '../examples/payments/openapi-types.js';
import { FakePsp } from '../examples/payments/psp.js';
import { paymentsTypes, TYPES_FILE } from '../scripts/openapi-types.js';
import { idempotencyComponents, withIdempotency } from '../src/openapi/index.js';
import { ProblemKind } from '../src/http/problem.js';

const doc = (openapi: string) => ({
  openapi,
  info: { title: 't', version: '1' },
  paths: {
    '/orders': {
      post: { responses: { '201': { description: 'created' }, '409': { description: 'our own conflict' } } },
      get: { responses: { '200': { description: 'list' } } },
    },
    '/orders/{id}': {
      patch: { parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }], responses: { '200': { description: 'updated' } } },
    },
  },
});

/** An operation as the tests read it back. */
interface Operation {
  parameters?: Array<{ $ref?: string; name?: string }>;
  responses: Record<string, { $ref?: string; description?: string; headers: Record<string, { $ref: string }> }>;
}

describe('idem/openapi', () => {
  test('the documents withIdempotency makes are valid OpenAPI 3.0 and 3.1 (@readme/openapi-parser), and so is the example’s', async () => {
    for (const version of ['3.0.3', '3.1.0']) {
      for (const options of [{}, { required: true, expiresHeader: true, stripe: true, mismatchStatus: 409 as const }]) {
        const result = await validate(withIdempotency(doc(version), options) as Parameters<typeof validate>[0]);
        assert.equal(result.valid, true, `${version} ${JSON.stringify(options)}: ${JSON.stringify(result)}`);
      }
    }
    const example = await validate(structuredClone(paymentsOpenApi) as Parameters<typeof validate>[0]);
    assert.equal(example.valid, true, JSON.stringify(example));
  });

  test('merges in one call: the key on protected operations only, the headers on stored answers, idem’s problems where the operation has none; the input is untouched', () => {
    const input = doc('3.1.0');
    const before = JSON.stringify(input);
    const out = withIdempotency(input, { required: true, expiresHeader: true }) as ReturnType<typeof doc> & {
      components: Record<string, Record<string, unknown>>;
    };
    assert.equal(JSON.stringify(input), before, 'the input document is not changed');
    const post = out.paths['/orders'].post as unknown as Operation;
    assert.deepEqual(post.parameters, [{ $ref: '#/components/parameters/IdemIdempotencyKey' }]);
    assert.deepEqual(Object.keys(post.responses['201']!.headers), ['Idempotent-Replayed', 'Idempotency-Key-Expires']);
    assert.equal(post.responses['409']!.description, 'our own conflict', 'an answer the operation describes is kept');
    assert.equal(post.responses['409']!.headers['Idempotent-Replayed']!.$ref, '#/components/headers/IdemIdempotentReplayed', 'a stored 409 may be replayed');
    for (const status of ['400', '422', '500', '503']) assert.equal(post.responses[status]!.$ref, `#/components/responses/IdemProblem${status}`);
    assert.equal((out.paths['/orders'].get as unknown as Operation).parameters, undefined, 'GET is not protected');
    const patch = out.paths['/orders/{id}'].patch as unknown as Operation;
    assert.equal(patch.parameters?.length, 2, 'PATCH keeps its own parameter and gets the key');
    assert.equal((out.components.parameters!.IdemIdempotencyKey as { required: boolean }).required, true);
    assert.deepEqual(withIdempotency(out, { required: true, expiresHeader: true }), out, 'merging twice changes nothing');
  });

  test('every problem idem answers has a schema and a response under its status', () => {
    const components = idempotencyComponents({ required: true, mismatchStatus: 409, webhooks: true });
    const types = Object.values(components.schemas as Record<string, { allOf?: Array<{ properties?: { type?: { enum?: string[] } } }> }>)
      .map((schema) => schema.allOf?.[1]?.properties?.type?.enum?.[0])
      .filter(Boolean);
    assert.deepEqual(
      types.sort(),
      Object.values(ProblemKind)
        .map((kind) => `urn:idem:problem:${kind}`)
        .sort(),
    );
    const conflict = components.responses.IdemProblem409 as { content: Record<string, { schema: { oneOf: unknown[] } }>; headers: Record<string, unknown> };
    assert.equal(conflict.content['application/problem+json']!.schema.oneOf.length, 3, 'in progress, lease lost and (mismatchStatus 409) reused');
    assert.ok(conflict.headers['Retry-After']);
    assert.equal(idempotencyComponents().schemas.IdemProblemKeyMissing, undefined, 'no 400 missing-key unless required');
  });

  test('the generated client types are what the document generates now (npm run openapi:types)', async () => {
    assert.equal(readFileSync(TYPES_FILE, 'utf8'), await paymentsTypes());
  });
});

describe('the example payments API: its document served, and a generated client', () => {
  let db: PGlite;
  let server: http.Server;
  let base = '';

  before(async () => {
    db = pglite();
    await migrate(db);
    const { app } = createPaymentsApp({ db, psp: new FakePsp(db, { latencyMs: 0 }), retentionMs: 3_600_000 });
    const info = await new Promise<AddressInfo>((resolve) => {
      server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, resolve) as http.Server;
    });
    server.keepAliveTimeout = 0;
    base = `http://127.0.0.1:${info.port}`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await db.close();
  });

  test('GET /openapi.json serves the merged document, which validates', async () => {
    const res = await fetch(`${base}/openapi.json`);
    assert.equal(res.status, 200);
    const served = await res.json();
    assert.deepEqual(served, JSON.parse(JSON.stringify(paymentsOpenApi)));
    const result = await validate(served);
    assert.equal(result.valid, true, JSON.stringify(result));
  });

  test('the generated client sends the key and sees Idempotent-Replayed, Idempotency-Key-Expires and idem’s problems', async () => {
    const client = paymentsClient(base, 'sk_test_openapi');
    const body = { amount: 1200, currency: 'usd', customer: 'cus_1' };
    const before = Date.now();
    const first = await client.createCharge(body, 'order-1');
    assert.equal(first.status, 201, JSON.stringify(first.problem));
    assert.equal(first.charge?.object, 'charge');
    assert.equal(first.replayed, false);
    const expires = Date.parse(first.keyExpires ?? '');
    assert.ok(expires >= before + 3_600_000 - 2000 && expires <= Date.now() + 3_600_000, `retention end ${first.keyExpires}`);
    const retry = await client.createCharge(body, 'order-1');
    assert.equal(retry.status, 201);
    assert.equal(retry.replayed, true);
    assert.deepEqual(retry.charge, first.charge);
    assert.ok(Math.abs(Date.parse(retry.keyExpires ?? '') - expires) <= 2000);
    const reused = await client.createCharge({ ...body, amount: 999 }, 'order-1');
    assert.equal(reused.status, 422);
    assert.equal(reused.problem?.type, 'urn:idem:problem:idempotency-key-reused', 'the problem body is typed and parsed');

    // What the generated types enforce (checked by npm run typecheck):
    const raw = createClient<paths>({ baseUrl: base });
    const replayed: ChargeCreatedHeaders['Idempotent-Replayed'] = 'true';
    // @ts-expect-error the replay marker is typed: only 'true'
    const wrong: ChargeCreatedHeaders['Idempotent-Replayed'] = 'yes';
    // @ts-expect-error the Idempotency-Key header is required by the document
    const withoutKey = () => raw.POST('/v1/charges', { body });
    assert.ok(replayed && wrong && withoutKey);
  });
});
