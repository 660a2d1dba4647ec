/**
 * Adapter contract, part: What gets stored (a rejected request frees the key, a returned error is stored) and what a thrown error does (release and resume, or store the 500).
 * Registered by `adapterContract` (test/contracts/adapter.ts) for every harness and store.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { assertProblem } from '../../helpers/http.js';
import type { Route } from '../../helpers/adapter-harness.js';
import { jsonReply, type SuiteContext } from './shared.js';

/** Registers this part of the adapter contract. */
export function storedSuite(c: SuiteContext): void {
  const { setup, touch } = c;
  describe('what gets stored', () => {
    const validating: Route = async (req, ctx) => {
      const body = await req.json<{ amount?: unknown }>();
      if (typeof body.amount !== 'number') return jsonReply(400, { error: 'amount required' });
      const charge = await ctx!.phase('charge', async (tx) => {
        await touch(tx);
        return { id: 'ch_ok', amount: body.amount };
      });
      return jsonReply(201, charge);
    };

    it('a 400 returned before any phase is not stored and frees the key: the fixed retry with the same key runs', async () => {
      const { send, counter, count } = await setup(validating);
      const bad = await send('/v1/charges', { key: 'fix-me', json: { amt: 1 } });
      assert.equal(bad.status, 400);
      assert.deepEqual(await bad.json(), { error: 'amount required' });
      assert.equal(counter.H, 1);
      assert.equal(await count(), 0, 'nothing stored, the claim is deleted');
      const again = await send('/v1/charges', { key: 'fix-me', json: { amt: 1 } });
      assert.equal(again.status, 400);
      assert.equal(again.headers.get('idempotent-replayed'), null);
      await again.arrayBuffer();
      assert.equal(counter.H, 2, 'the same invalid request runs again, it is not replayed');
      const fixed = await send('/v1/charges', { key: 'fix-me', json: { amount: 7 } });
      assert.equal(fixed.status, 201);
      assert.equal(fixed.headers.get('idempotent-replayed'), null);
      assert.deepEqual(await fixed.json(), { id: 'ch_ok', amount: 7 });
      assert.equal(counter.H, 3);
      assert.equal(await count(), 1);
    });

    it('ctx.reject() with a 409 is not stored and frees the key', async () => {
      let conflict = true;
      const { send, counter, count } = await setup((_req, ctx) => {
        if (!conflict) return jsonReply(201, { ok: true });
        ctx!.reject();
        return jsonReply(409, { error: 'version conflict' });
      });
      const first = await send('/v1/orders', { key: 'rej-1', json: { v: 1 } });
      assert.equal(first.status, 409);
      assert.equal(await first.text(), '{"error":"version conflict"}');
      assert.equal(await count(), 0);
      conflict = false;
      const retry = await send('/v1/orders', { key: 'rej-1', json: { v: 1 } });
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get('idempotent-replayed'), null);
      await retry.arrayBuffer();
      assert.equal(counter.H, 2);
      assert.equal(await count(), 1);
    });

    it('a 409 the handler returns without reject() is stored and replayed', async () => {
      const { send, counter } = await setup(() => jsonReply(409, { error: 'conflict' }));
      const first = await send('/v1/orders', { key: 'own-409', json: {} });
      assert.equal(first.status, 409);
      await first.arrayBuffer();
      const replay = await send('/v1/orders', { key: 'own-409', json: {} });
      assert.equal(replay.status, 409);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await replay.arrayBuffer();
      assert.equal(counter.H, 1);
    });

    it('a 400 returned after a phase committed is stored and replayed', async () => {
      const { send, counter, rows } = await setup(async (_req, ctx) => {
        await ctx!.phase('reserved', async () => ({ reserved: true }));
        ctx!.reject(); // has no effect once work started
        return jsonReply(400, { error: 'declined after reserve' });
      });
      const first = await send('/v1/orders', { key: 'late-400', json: {} });
      assert.equal(first.status, 400);
      await first.arrayBuffer();
      const [row] = await rows();
      assert.equal(row!.state, 'done');
      assert.equal(row!.response_status, 400);
      const replay = await send('/v1/orders', { key: 'late-400', json: {} });
      assert.equal(replay.status, 400);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(await replay.text(), '{"error":"declined after reserve"}');
      assert.equal(counter.H, 1);
    });
  });

  describe('thrown errors', () => {
    it('default onThrow release: a throw after a committed phase gives a 500 request-failed-retry problem; the retry resumes after that phase', async () => {
      const runs = { a: 0, b: 0 };
      let crash = true;
      const { send, counter, rows, errors } = await setup(async (_req, ctx) => {
        const a = await ctx!.phase('a', async (tx) => {
          runs.a++;
          await touch(tx);
          return { n: 1 };
        });
        if (crash) {
          crash = false;
          throw new Error('downstream exploded');
        }
        const b = await ctx!.phase('b', async () => {
          runs.b++;
          return 2;
        });
        return jsonReply(201, { a, b, resumed: ctx!.resumed });
      });
      const problem = await assertProblem(await send('/v1/transfers', { key: 'crash-1', json: { amount: 1 } }), 500, 'request-failed-retry');
      assert.match(String(problem.detail), /same idempotency key/i);
      assert.equal(errors.length, 1);
      const [row] = await rows();
      assert.deepEqual([row!.state, row!.recovery_point, row!.locked], ['started', 'a', false], 'the lease was released at recovery point a');
      const retry = await send('/v1/transfers', { key: 'crash-1', json: { amount: 1 } });
      assert.equal(retry.status, 201);
      assert.deepEqual(await retry.json(), { a: { n: 1 }, b: 2, resumed: true });
      assert.deepEqual(runs, { a: 1, b: 1 }, 'phase a is not run again, b runs once');
      assert.equal(counter.H, 2);
      const replay = await send('/v1/transfers', { key: 'crash-1', json: { amount: 1 } });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await replay.arrayBuffer();
      assert.equal(counter.H, 2);
    });

    it("onThrow: 'store' stores the 500 problem and replays it", async () => {
      const { send, counter, rows } = await setup(
        async (_req, ctx) => {
          await ctx!.phase('a', async () => 1);
          throw new Error('boom');
        },
        { onThrow: 'store' },
      );
      const first = await send('/v1/transfers', { key: 'store-500', json: {} });
      const firstText = await first.clone().text();
      await assertProblem(first, 500, 'request-failed-retry');
      assert.equal((await rows())[0]!.state, 'done');
      const replay = await send('/v1/transfers', { key: 'store-500', json: {} });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(await replay.clone().text(), firstText);
      await assertProblem(replay, 500, 'request-failed-retry');
      assert.equal(counter.H, 1);
    });
  });
}
