/**
 * Adapter contract, part: the expiry signal (protocol.md H40). With `expiresHeader`, the first
 * response of a key and every replay carry the end of its retention as an HTTP-date; off by
 * default; never on a response that kept nothing (a rejection, a 409 in progress).
 * Registered by `adapterContract` (test/contracts/adapter.ts) for every harness and store.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { jsonReply, type SuiteContext } from './shared.js';

const RETENTION_MS = 2 * 60 * 60_000;
const HEADER = 'idempotency-key-expires';

/** The header as epoch ms, after checking it is an IMF-fixdate. */
function expiry(res: Response): number {
  const value = res.headers.get(HEADER);
  assert.ok(value, `${HEADER} is sent`);
  assert.match(value, /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/, 'an HTTP-date (IMF-fixdate)');
  return Date.parse(value);
}

/** Registers this part of the adapter contract. */
export function expirySuite(c: SuiteContext): void {
  const { setup } = c;
  describe('expiry signal (H40)', () => {
    it('with expiresHeader, the first response and every replay say when the key’s retention ends', async () => {
      const { send, counter } = await setup(() => jsonReply(201, { id: 'ch_1' }), { expiresHeader: true, retentionMs: RETENTION_MS });
      const before = Date.now();
      const first = await send('/v1/charges', { key: 'exp-1', json: { amount: 1 } });
      const after = Date.now();
      assert.equal(first.status, 201);
      await first.arrayBuffer();
      const firstEnds = expiry(first);
      assert.ok(firstEnds >= before + RETENTION_MS - 2000 && firstEnds <= after + RETENTION_MS, `retention ends ${RETENTION_MS} ms after the claim`);
      const replay = await send('/v1/charges', { key: 'exp-1', json: { amount: 1 } });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await replay.arrayBuffer();
      assert.ok(Math.abs(expiry(replay) - firstEnds) <= 2000, 'a replay names the same end: retention counts from the claim');
      assert.equal(counter.H, 1);
    });

    it('a response stored with ctx.respond carries it too', async () => {
      const { send } = await setup(
        async (_req, ctx) => ctx!.respond(async () => new Response('{"ok":true}', { status: 201, headers: { 'content-type': 'application/json' } })),
        {
          expiresHeader: true,
        },
      );
      const first = await send('/v1/payments', { key: 'exp-respond', json: {} });
      assert.equal(first.status, 201);
      await first.arrayBuffer();
      const replay = await send('/v1/payments', { key: 'exp-respond', json: {} });
      await replay.arrayBuffer();
      assert.ok(Math.abs(expiry(first) - expiry(replay)) <= 2000);
    });

    it('a custom name; nothing on a rejection that kept nothing or on a 409 in progress; nothing by default', async () => {
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      let entered!: () => void;
      const inHandler = new Promise<void>((resolve) => (entered = resolve));
      const { send } = await setup(
        async (req) => {
          if (req.path === '/v1/slow') {
            entered();
            await held;
          }
          if (req.path === '/v1/bad') return jsonReply(400, { error: 'bad' });
          return jsonReply(201, { ok: true });
        },
        { expiresHeader: 'X-Key-Expires' },
      );
      const ok = await send('/v1/ok', { key: 'named', json: {} });
      await ok.arrayBuffer();
      assert.ok(ok.headers.get('x-key-expires'), 'the custom name');
      assert.equal(ok.headers.get(HEADER), null);
      const bad = await send('/v1/bad', { key: 'bad', json: {} });
      assert.equal(bad.status, 400);
      await bad.arrayBuffer();
      assert.equal(bad.headers.get('x-key-expires'), null, 'a rejected request kept nothing');
      // The duplicate is sent only once the first request holds the key (inside its handler):
      // sent earlier, it could claim the key itself and wait on `held` for good.
      const slow = send('/v1/slow', { key: 'slow', json: {} });
      await inHandler;
      const busy = await send('/v1/slow', { key: 'slow', json: {} });
      assert.equal(busy.status, 409);
      await busy.arrayBuffer();
      assert.equal(busy.headers.get('x-key-expires'), null, 'in progress: no promise yet');
      release();
      await (await slow).arrayBuffer();

      const plain = await setup(() => jsonReply(201, { ok: true }));
      const first = await plain.send('/v1/charges', { key: 'plain', json: {} });
      await first.arrayBuffer();
      const replay = await plain.send('/v1/charges', { key: 'plain', json: {} });
      await replay.arrayBuffer();
      assert.equal(first.headers.get(HEADER), null, 'off by default');
      assert.equal(replay.headers.get(HEADER), null);
    });
  });
}
