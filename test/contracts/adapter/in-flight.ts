/**
 * Adapter contract, part: While the first request is still running: 409 with Retry-After, 50 parallel duplicates, and a client that disconnects mid-work.
 * Registered by `adapterContract` (test/contracts/adapter.ts) for every harness and store.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { assertProblem, deferred, poll, requestInit } from '../../helpers/http.js';
import { GATED, jsonReply, created, type SuiteContext } from './shared.js';

/** Registers this part of the adapter contract. */
export function inFlightSuite(c: SuiteContext): void {
  const { setup, touch } = c;
  describe('while the first request is running', () => {
    it('a different body gets 422 (not 409); the same request gets 409 request-in-progress with Retry-After in [1, ceil(lease/1000)]', GATED, async () => {
      const leaseMs = 4000;
      const entered = deferred();
      const gate = deferred();
      const { send, counter, count } = await setup(
        async (req, ctx) => {
          entered.resolve();
          await gate.promise;
          return created(req, ctx);
        },
        { leaseMs },
      );
      const first = send('/v1/charges', { key: 'busy-1', json: { amount: 1 } });
      await entered.promise;
      await assertProblem(await send('/v1/charges', { key: 'busy-1', json: { amount: 2 } }), 422, 'idempotency-key-reused');
      const busy = await send('/v1/charges', { key: 'busy-1', json: { amount: 1 } });
      const retryAfter = busy.headers.get('retry-after') ?? '';
      await assertProblem(busy, 409, 'request-in-progress');
      assert.match(retryAfter, /^\d+$/);
      assert.ok(Number(retryAfter) >= 1 && Number(retryAfter) <= Math.ceil(leaseMs / 1000), `Retry-After ${retryAfter}`);
      gate.resolve();
      const done = await first;
      assert.equal(done.status, 201);
      await done.arrayBuffer();
      const replay = await send('/v1/charges', { key: 'busy-1', json: { amount: 1 } });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await replay.arrayBuffer();
      assert.equal(counter.H, 1);
      assert.equal(await count(), 1);
    });

    it('50 parallel identical requests over a real HTTP server: H=1, one row, every answer a 201 (original or replay) or a 409', GATED, async () => {
      const { app, counter, count } = await setup(async (req, ctx) => {
        const body = await req.json();
        const charge = await ctx!.phase('charge', async (tx) => {
          await touch(tx);
          return { id: 'ch_parallel', body };
        });
        await new Promise((r) => setTimeout(r, 150));
        return jsonReply(201, charge);
      });
      const url = (await app.serve()) + '/v1/charges';
      const responses = await Promise.all(Array.from({ length: 50 }, () => fetch(url, requestInit({ key: 'parallel-1', json: { amount: 42 } }))));
      const results = await Promise.all(
        responses.map(async (r) => ({
          status: r.status,
          replayed: r.headers.get('idempotent-replayed'),
          type: r.headers.get('content-type'),
          text: await r.text(),
        })),
      );
      const statuses = new Set(results.map((r) => r.status));
      assert.ok(
        [...statuses].every((s) => s === 201 || s === 409),
        `statuses: ${[...statuses].join(', ')}`,
      );
      const ok = results.filter((r) => r.status === 201);
      assert.equal(ok.filter((r) => r.replayed !== 'true').length, 1, 'exactly one original 201');
      assert.equal(new Set(ok.map((r) => r.text)).size, 1, 'every 201 carries the same body');
      for (const r of results.filter((x) => x.status === 409)) {
        assert.equal(r.type, 'application/problem+json');
        assert.equal(JSON.parse(r.text).type, 'urn:idem:problem:request-in-progress');
      }
      assert.equal(counter.H, 1);
      assert.equal(await count(), 1);
    });
  });

  describe('client disconnects', () => {
    it('a client disconnecting mid-work over a real HTTP server does not cancel the work or the write of its result', GATED, async () => {
      const entered = deferred();
      const gate = deferred();
      const { app, counter, rows } = await setup(async (_req, ctx) => {
        entered.resolve();
        await gate.promise;
        return jsonReply(201, await ctx!.phase('charge', async () => ({ id: 'ch_disc' })));
      });
      const base = await app.serve();
      const abort = new AbortController();
      const gone = fetch(base + '/v1/charges', { ...requestInit({ key: 'disc', json: { amount: 1 } }), signal: abort.signal }).then(
        () => 'answered',
        () => 'aborted',
      );
      await entered.promise;
      abort.abort();
      assert.equal(await gone, 'aborted');
      gate.resolve();
      const row = await poll(async () => (await rows()).find((r) => r.state === 'done'), 3000, 'the result to be stored');
      assert.equal(row.response_status, 201);
      const retry = await fetch(base + '/v1/charges', requestInit({ key: 'disc', json: { amount: 1 } }));
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await retry.json(), { id: 'ch_disc' });
      assert.equal(counter.H, 1);
    });
  });
}
