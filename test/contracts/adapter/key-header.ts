/**
 * Adapter contract, part: the key header's name (`keyHeader`, its deprecated alias `headerName`)
 * and failure counting (`maxAttempts`), the same on every adapter.
 * Registered by `adapterContract` (test/contracts/adapter.ts) for every harness and store.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { assertProblem } from '../../helpers/http.js';
import { created, type SuiteContext } from './shared.js';

/** Registers this part of the adapter contract. */
export function keyHeaderSuite(c: SuiteContext): void {
  const { setup } = c;
  describe('the key header name', () => {
    it('headerName (the alias of keyHeader) names the key header: a request with it is idempotent, H=1', async () => {
      const { send, counter, count } = await setup(created, { headerName: 'X-Request-Key' });
      const first = await send('/v1/charges', { json: { amount: 1 }, headers: { 'x-request-key': 'alias-1' } });
      assert.equal(first.status, 201);
      const firstBody = await first.text();
      const retry = await send('/v1/charges', { json: { amount: 1 }, headers: { 'x-request-key': 'alias-1' } });
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get('idempotent-replayed'), 'true');
      assert.equal(await retry.text(), firstBody);
      assert.equal(counter.H, 1);
      assert.equal(await count(), 1);
    });

    it('with headerName set, the default Idempotency-Key header is not read: the POST passes unprotected, or gets 400 when required', async () => {
      const open = await setup(created, { headerName: 'X-Request-Key' });
      for (let i = 0; i < 2; i++) {
        const res = await open.send('/v1/charges', { key: 'default-1', json: { amount: 1 } });
        assert.equal(res.status, 201);
        assert.equal(res.headers.get('idempotent-replayed'), null);
        await res.arrayBuffer();
      }
      assert.equal(open.counter.H, 2);
      assert.equal(await open.count(), 0);
      const required = await setup(created, { headerName: 'X-Request-Key', required: true });
      const problem = await assertProblem(await required.send('/v1/charges', { key: 'default-2', json: { amount: 1 } }), 400, 'idempotency-key-missing');
      assert.match(String(problem.detail), /X-Request-Key/);
      assert.equal(required.counter.H, 0);
    });
  });

  describe('failure counting', () => {
    it('maxAttempts: 3 — a route that always throws runs 3 times over 6 retries of one key, then the stored failure is replayed', async () => {
      const { send, counter } = await setup(
        () => {
          throw new Error('always fails');
        },
        { maxAttempts: 3 },
      );
      const statuses: Array<[number, string | null]> = [];
      for (let i = 0; i < 6; i++) {
        const res = await send('/v1/charges', { key: 'fails-1', json: { amount: 1 } });
        statuses.push([res.status, res.headers.get('idempotent-replayed')]);
        const problem = (await res.json()) as { type?: string };
        if (i >= 3) assert.match(String(problem.type), /request-failed-permanently/, `retry ${i + 1} replays the stored failure`);
      }
      assert.equal(counter.H, 3, 'the route ran three times, never again');
      assert.deepEqual(
        statuses.slice(3).map(([status, replayed]) => [status, replayed]),
        [
          [500, 'true'],
          [500, 'true'],
          [500, 'true'],
        ],
      );
    });
  });
}
