/**
 * Adapter contract, part: ctx.respond (the effect and the stored response in one commit, rolled back together) and retention (a key past it runs fresh).
 * Registered by `adapterContract` (test/contracts/adapter.ts) for every harness and store.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { assertProblem, bytes, hex } from '../../helpers/http.js';
import { eventually } from '../../helpers/wait.js';
import { created, toJson201, type SuiteContext } from './shared.js';

/** Registers this part of the adapter contract. */
export function respondSuite(c: SuiteContext): void {
  const { setup, time, current } = c;
  describe('ctx.respond', () => {
    /** How many business effects took hold. */
    const effectCount = async () => (await current().effects()).length;

    it('commits the effect and the stored response together; the response sent equals the replay byte for byte', async () => {
      let lastId = 0;
      const { send, counter, rows } = await setup(async (_req, ctx) =>
        ctx!.respond(async (tx) => {
          await current().effect('paid')(tx);
          const id = ++lastId;
          return new Response(JSON.stringify({ id, at: Math.random() }), {
            status: 201,
            headers: { 'content-type': 'application/json', location: `/v1/payments/${id}` },
          });
        }),
      );
      const first = await send('/v1/payments', { key: 'respond-1', json: { amount: 1 } });
      assert.equal(first.status, 201);
      const firstBytes = await bytes(first);
      const [row] = await rows();
      assert.equal(row!.state, 'done');
      assert.equal(row!.response_body, hex(firstBytes), 'the stored body is what was sent');
      assert.equal(await effectCount(), 1);
      const replay = await send('/v1/payments', { key: 'respond-1', json: { amount: 1 } });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(replay.headers.get('location'), first.headers.get('location'));
      assert.equal(hex(await bytes(replay)), hex(firstBytes));
      assert.equal(counter.H, 1);
      assert.equal(await effectCount(), 1);
    });

    it('when the finishing write is fenced (another worker took over), the effect rolls back with it', async () => {
      let held: number | undefined;
      const app = await setup(async (_req, ctx) =>
        ctx!.respond(async (tx) => {
          held = ctx!.execution.token;
          await current().effect('paid')(tx);
          // Simulate a takeover racing this transaction: the token moves on.
          await current().staleInTx(tx, ctx!.scope, ctx!.key);
          return toJson201();
        }),
      );
      await assertProblem(await app.send('/v1/payments', { key: 'fenced-1', json: {} }), 409, 'idempotency-lease-lost');
      assert.equal(await effectCount(), 0, 'the effect was rolled back');
      const [row] = await app.rows();
      assert.equal(row!.state, 'started');
      assert.equal(row!.response_status, null);
      assert.ok(held !== undefined && held > 0, `the handler held a token (${held})`);
      assert.equal(row!.lock_version, String(held), 'the token bump in the same transaction rolled back too');
    });

    it('when the respond callback throws after its effect, neither the effect nor a response is stored; the retry runs', async () => {
      let crash = true;
      const { send, counter, rows } = await setup(async (_req, ctx) =>
        ctx!.respond(async (tx) => {
          await current().effect('paid')(tx);
          if (crash) {
            crash = false;
            throw new Error('after insert');
          }
          return toJson201();
        }),
      );
      await assertProblem(await send('/v1/payments', { key: 'throw-1', json: {} }), 500, 'request-failed-retry');
      assert.equal(await effectCount(), 0);
      assert.equal((await rows())[0]!.response_status, null);
      const retry = await send('/v1/payments', { key: 'throw-1', json: {} });
      assert.equal(retry.status, 201);
      await retry.arrayBuffer();
      assert.equal(counter.H, 2);
      assert.equal(await effectCount(), 1);
    });
  });

  describe('retention', () => {
    it('after retention the same key runs fresh; replays do not extend retention', async () => {
      const { send, counter, count } = await setup(created, { retentionMs: 1500, leaseMs: 500, heartbeatMs: 0 });
      const started = Date.now();
      const first = await send('/v1/charges', { key: 'ret-1', json: {} });
      assert.equal(first.status, 201);
      await first.arrayBuffer();
      let replays = 0;
      // Every 100 ms on the suite's clock (the memory store's moves without waiting).
      const fresh = await eventually(
        async () => {
          const res = await send('/v1/charges', { key: 'ret-1', json: {} });
          await res.arrayBuffer();
          if (res.headers.get('idempotent-replayed') === 'true') replays++;
          return res;
        },
        (res) => res.headers.get('idempotent-replayed') !== 'true',
        { timeoutMs: 4000, everyMs: 100, time },
      );
      const elapsed = Date.now() - started;
      assert.equal(fresh.status, 201);
      assert.ok(replays >= 3, `replays kept coming while retention ran (${replays})`);
      assert.ok(elapsed >= 1000, `expired after ${elapsed} ms, not before retention`);
      assert.equal(counter.H, 2);
      assert.equal(await count(), 1, 'the expired row was replaced');
    });
  });
}
