/**
 * Adapter contract, part: Problem details: application/problem+json with a distinct type per condition, and the Stripe and docs-link options.
 * Registered by `adapterContract` (test/contracts/adapter.ts) for every harness and store.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { assertProblem, deferred, requestInit, unreachableStore } from '../../helpers/http.js';
import { GATED, created, type SuiteContext } from './shared.js';

/** Registers this part of the adapter contract. */
export function problemSuite(c: SuiteContext): void {
  const { harness, setup, cleanup } = c;
  describe('problem details', () => {
    it('every idem problem is application/problem+json with status = HTTP status and a distinct type per condition', GATED, async () => {
      const entered = deferred();
      const gate = deferred();
      const { send } = await setup(
        async (req, ctx) => {
          if (ctx?.key === 'p2') {
            entered.resolve();
            await gate.promise;
            return { status: 204 };
          }
          if (ctx?.key === 'p3') throw new Error('x');
          return created(req, ctx);
        },
        { required: true, leaseMs: 5000 },
      );
      const types = new Map<string, number>();
      const record = async (res: Response, status: number, kind: string) => {
        const p = await assertProblem(res, status, kind);
        types.set(p.type, status);
      };
      await record(await send('/v1/x', { json: {} }), 400, 'idempotency-key-missing');
      await record(await send('/v1/x', { key: '', json: {} }), 400, 'idempotency-key-invalid');
      await (await send('/v1/x', { key: 'p1', json: { a: 1 } })).arrayBuffer();
      await record(await send('/v1/x', { key: 'p1', json: { a: 2 } }), 422, 'idempotency-key-reused');
      const slow = send('/v1/x', { key: 'p2' });
      await entered.promise;
      await record(await send('/v1/x', { key: 'p2' }), 409, 'request-in-progress');
      gate.resolve();
      await (await slow).arrayBuffer();
      await record(await send('/v1/x', { key: 'p3' }), 500, 'request-failed-retry');
      const down = unreachableStore();
      try {
        const offline = harness.build({ store: down.store, required: true }, () => ({ status: 200, body: 'ran' }), cleanup);
        await record(await offline.send('/v1/x', requestInit({ key: 'p4' })), 503, 'idempotency-store-unavailable');
      } finally {
        await down.close();
      }
      assert.equal(types.size, 6, `distinct types: ${[...types.keys()].join(', ')}`);
    });

    it('problems.stripe adds error {type, code, message}; problems.docsUrl adds Link rel="describedby"', async () => {
      const docsUrl = 'https://docs.example.com/errors/idempotency';
      const { send } = await setup(created, { required: true, problems: { stripe: true, docsUrl } });
      const link = `<${docsUrl}>; rel="describedby"`;
      const missing = await send('/v1/x', { json: {} });
      assert.equal(missing.headers.get('link'), link);
      const body = await assertProblem(missing, 400, 'idempotency-key-missing');
      assert.deepEqual(body.error, { type: 'invalid_request_error', code: 'idempotency_key_missing', message: body.detail });
      const invalid = await send('/v1/x', { key: 'x'.repeat(300), json: {} });
      assert.equal(invalid.headers.get('link'), link);
      const invalidBody = await assertProblem(invalid, 400, 'idempotency-key-invalid');
      assert.deepEqual(invalidBody.error, { type: 'invalid_request_error', code: 'idempotency_key_invalid', message: invalidBody.detail });
      await (await send('/v1/x', { key: 's1', json: { a: 1 } })).arrayBuffer();
      const reused = await send('/v1/x', { key: 's1', json: { a: 2 } });
      assert.equal(reused.headers.get('link'), link);
      const reusedBody = await assertProblem(reused, 422, 'idempotency-key-reused');
      assert.deepEqual(reusedBody.error, { type: 'idempotency_error', code: 'idempotency_key_reused', message: reusedBody.detail });
    });

    it('without the stripe option there is no error member and no Link', async () => {
      const { send } = await setup(created, { required: true });
      const res = await send('/v1/x', { json: {} });
      assert.equal(res.headers.get('link'), null);
      const body = await assertProblem(res, 400, 'idempotency-key-missing');
      assert.equal(body.error, undefined);
    });
  });
}
