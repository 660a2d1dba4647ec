/**
 * Adapter contract, part: Which requests are protected, the key header, first execution and replay, and the same key with a different request.
 * Registered by `adapterContract` (test/contracts/adapter.ts) for every harness and store.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { assertProblem, bytes, hex, INVALID_KEYS, type Send } from '../../helpers/http.js';
import type { Ctx } from '../../helpers/adapter-harness.js';
import { jsonReply, created, type SuiteContext } from './shared.js';

/** Registers this part of the adapter contract. */
export function requestSuite(c: SuiteContext): void {
  const { harness, setup } = c;
  describe('which requests are protected', () => {
    it('GET, PUT and DELETE with a key pass through unprotected: the handler runs every time, no row is written', async () => {
      const seen: Ctx[] = [];
      const { send, counter, count } = await setup(
        (_req, ctx) => {
          seen.push(ctx);
          return { status: 200, body: 'ok' };
        },
        { required: true },
      );
      for (const method of ['GET', 'PUT', 'DELETE', 'GET', 'PUT', 'DELETE']) {
        const res = await send('/v1/things/1', { method, key: 'same-key', body: method === 'PUT' ? 'x' : undefined });
        assert.equal(res.status, 200, method);
        assert.equal(res.headers.get('idempotent-replayed'), null);
        await res.arrayBuffer();
      }
      assert.equal(counter.H, 6);
      assert.deepEqual(seen, Array(6).fill(undefined));
      assert.equal(await count(), 0);
    });

    it('a POST without a key passes through unprotected when the key is not required', async () => {
      let ctxSeen: Ctx | 'unset' = 'unset';
      const { send, counter, count } = await setup(async (req, ctx) => {
        ctxSeen = ctx;
        return { status: 201, body: await req.text() };
      });
      const a = await send('/v1/charges', { json: { amount: 1 } });
      const b = await send('/v1/charges', { json: { amount: 1 } });
      assert.equal(a.status, 201);
      assert.equal(await a.text(), '{"amount":1}', 'the handler can still read the body');
      assert.equal(b.status, 201);
      assert.equal(b.headers.get('idempotent-replayed'), null);
      await b.arrayBuffer();
      assert.equal(ctxSeen, undefined);
      assert.equal(counter.H, 2);
      assert.equal(await count(), 0);
    });

    it('required: true — a POST (or PATCH) without a key gets a 400 idempotency-key-missing problem, H=0, nothing stored', async () => {
      const { send, counter, count } = await setup(created, { required: true });
      const problem = await assertProblem(await send('/v1/charges', { json: { amount: 1 } }), 400, 'idempotency-key-missing');
      assert.match(String(problem.detail), /Idempotency-Key/);
      await assertProblem(await send('/v1/charges/1', { method: 'PATCH', json: { amount: 1 } }), 400, 'idempotency-key-missing');
      assert.equal(counter.H, 0);
      assert.equal(await count(), 0);
    });
  });

  describe('the key', () => {
    // fetch refuses a header value with 0x01, so that key is only sent in process.
    const keys = harness.socket ? INVALID_KEYS : [...INVALID_KEYS, ['a key with a control character (0x01)', 'a\x01b'] as [string, string]];
    for (const [name, value] of keys) {
      it(`${name} gets a 400 idempotency-key-invalid problem, H=0, no row`, async () => {
        const { send, counter, count } = await setup(created);
        await assertProblem(await send('/v1/charges', { key: value, json: { amount: 1 } }), 400, 'idempotency-key-invalid');
        assert.equal(counter.H, 0);
        assert.equal(await count(), 0);
      });
    }

    it('a 255-character key is accepted and stored whole (never truncated)', async () => {
      const { send, counter, rows } = await setup(created);
      const key = 'k'.repeat(254) + 'z';
      const first = await send('/v1/charges', { key, json: {} });
      assert.equal(first.status, 201);
      await first.arrayBuffer();
      const [row] = await rows();
      assert.equal(row!.key, key);
      const replay = await send('/v1/charges', { key, json: {} });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await replay.arrayBuffer();
      assert.equal(counter.H, 1);
    });

    it('the sf-string "k1" and the bare token k1 are the same key: the second is a replay', async () => {
      const { send, counter, rows } = await setup(created);
      const first = await send('/v1/charges', { key: '"k1"', json: { amount: 5 } });
      assert.equal(first.status, 201);
      const firstBytes = await bytes(first);
      const second = await send('/v1/charges', { key: 'k1', json: { amount: 5 } });
      assert.equal(second.status, 201);
      assert.equal(second.headers.get('idempotent-replayed'), 'true');
      assert.equal(hex(await bytes(second)), hex(firstBytes));
      assert.equal(counter.H, 1);
      assert.deepEqual(
        (await rows()).map((r) => r.key),
        ['k1'],
      );
    });
  });

  describe('first execution and replay', () => {
    it('a retry gets the same status, byte-identical body, allow-listed headers and Idempotent-Replayed: true', async () => {
      const { send, counter, rows } = await setup(created);
      const first = await send('/v1/charges', { key: 'replay-1', json: { amount: 100 } });
      assert.equal(first.status, 201);
      assert.equal(first.headers.get('idempotent-replayed'), null);
      const firstBody = await bytes(first);
      assert.equal(JSON.parse(Buffer.from(firstBody).toString()).received, '{"amount":100}'.length, 'the handler read the body');
      const [row] = await rows();
      assert.equal(row!.state, 'done');
      assert.equal(row!.response_status, 201);
      assert.equal(row!.response_body, hex(firstBody));
      for (let i = 0; i < 2; i++) {
        const replay = await send('/v1/charges', { key: 'replay-1', json: { amount: 100 } });
        assert.equal(replay.status, 201);
        assert.equal(hex(await bytes(replay)), hex(firstBody));
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        for (const name of ['content-type', 'location', 'etag']) {
          assert.ok(first.headers.get(name), `first ${name}`);
          assert.equal(replay.headers.get(name), first.headers.get(name), name);
        }
      }
      assert.equal(counter.H, 1);
    });

    it('Set-Cookie and x-request-id are in the first response but never in the replay (nor stored)', async () => {
      const { send, rows } = await setup(created);
      const first = await send('/v1/charges', { key: 'cookie-1', json: {} });
      assert.deepEqual(first.headers.getSetCookie(), ['session=s3cr3t; HttpOnly']);
      assert.match(first.headers.get('x-request-id') ?? '', /^req-/);
      await first.arrayBuffer();
      const replay = await send('/v1/charges', { key: 'cookie-1', json: {} });
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(replay.headers.getSetCookie(), []);
      assert.equal(replay.headers.get('x-request-id'), null);
      await replay.arrayBuffer();
      assert.doesNotMatch(JSON.stringify((await rows())[0]!.response_headers), /s3cr3t|set-cookie|x-request-id/i);
    });

    it('a binary body with 0x00 and 0xff bytes round-trips exactly, request and response', async () => {
      const payload = new Uint8Array([0x00, 0xff, 0x00, 0x7f, 0x80, 0xfe, 0x0d, 0x0a, 0x00]);
      const received: string[] = [];
      const { send, counter } = await setup(async (req) => {
        const got = await req.bytes();
        received.push(hex(got));
        return { status: 201, headers: { 'content-type': 'application/octet-stream' }, body: new Uint8Array([0xff, ...got, 0x00]) };
      });
      const opts = { key: 'bin-1', body: payload, headers: { 'content-type': 'application/octet-stream' } };
      const first = await send('/v1/blobs', opts);
      assert.equal(first.status, 201);
      const firstBytes = await bytes(first);
      assert.deepEqual(received, [hex(payload)], 'the handler receives the exact request bytes');
      assert.equal(hex(firstBytes), 'ff' + hex(payload) + '00');
      const replay = await send('/v1/blobs', opts);
      assert.equal(replay.status, 201);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(replay.headers.get('content-type'), 'application/octet-stream');
      assert.equal(hex(await bytes(replay)), hex(firstBytes));
      assert.equal(counter.H, 1);
    });

    it('an empty 204 round-trips exactly', async () => {
      const { send, counter, rows } = await setup(() => ({ status: 204, headers: { etag: '"e204"' } }));
      const first = await send('/v1/things/1/archive', { key: 'nc-1' });
      assert.equal(first.status, 204);
      assert.equal((await bytes(first)).length, 0);
      const replay = await send('/v1/things/1/archive', { key: 'nc-1' });
      assert.equal(replay.status, 204);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(replay.headers.get('etag'), '"e204"');
      assert.equal(replay.body, null);
      assert.equal(counter.H, 1);
      assert.equal((await rows())[0]!.response_body, '');
    });

    for (const status of [402, 500]) {
      it(`a returned ${status} is stored and replayed (H=1)`, async () => {
        const { send, counter, rows } = await setup(() => jsonReply(status, { error: { code: status === 402 ? 'card_declined' : 'oops' } }));
        const first = await send('/v1/charges', { key: `s-${status}`, json: { amount: 1 } });
        assert.equal(first.status, status);
        const firstBody = await first.text();
        const replay = await send('/v1/charges', { key: `s-${status}`, json: { amount: 1 } });
        assert.equal(replay.status, status);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.text(), firstBody);
        assert.equal(counter.H, 1);
        assert.equal((await rows())[0]!.response_status, status);
      });
    }
  });

  describe('same key, different request', () => {
    it('reordered JSON keys in the retry are the same request: replay (H=1)', async () => {
      const { send, counter } = await setup(created);
      const json = { 'content-type': 'application/json' };
      const first = await send('/v1/charges', { key: 'order-1', body: '{"amount":100,"currency":"eur","meta":{"a":1,"b":2}}', headers: json });
      assert.equal(first.status, 201);
      const firstText = await first.text();
      const retry = await send('/v1/charges', { key: 'order-1', body: '{ "meta": {"b":2, "a":1.0}, "currency":"eur", "amount":100 }', headers: json });
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get('idempotent-replayed'), 'true');
      assert.equal(await retry.text(), firstText);
      assert.equal(counter.H, 1);
    });

    const variants: Array<[string, [string, Send], [string, Send]]> = [
      ['a different body', ['/v1/charges', { json: { amount: 100 } }], ['/v1/charges', { json: { amount: 200 } }]],
      ['a different path', ['/v1/charges', { json: { amount: 100 } }], ['/v1/refunds', { json: { amount: 100 } }]],
      ['a different query', ['/v1/charges?expand=customer', { json: { amount: 100 } }], ['/v1/charges?expand=invoice', { json: { amount: 100 } }]],
      ['a different method (PATCH vs POST)', ['/v1/charges/ch_1', { json: { amount: 100 } }], ['/v1/charges/ch_1', { method: 'PATCH', json: { amount: 100 } }]],
    ];
    for (const [name, [path1, send1], [path2, send2]] of variants) {
      it(`${name} with the same key gets a 422 idempotency-key-reused problem; the row is untouched and the original still replays`, async () => {
        const { send, counter, rows } = await setup(created);
        const first = await send(path1, { ...send1, key: 'reuse-1' });
        assert.equal(first.status, 201);
        const firstBody = await first.text();
        const before = await rows();
        await assertProblem(await send(path2, { ...send2, key: 'reuse-1' }), 422, 'idempotency-key-reused');
        assert.deepEqual(await rows(), before, 'the stored row is untouched');
        const replay = await send(path1, { ...send1, key: 'reuse-1' });
        assert.equal(replay.status, 201);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(await replay.text(), firstBody);
        assert.equal(counter.H, 1);
      });
    }

    it('mismatchStatus: 409 answers a reused key with 409', async () => {
      const { send, counter } = await setup(created, { mismatchStatus: 409 });
      const first = await send('/v1/charges', { key: 'm409', json: { amount: 1 } });
      assert.equal(first.status, 201);
      await first.arrayBuffer();
      await assertProblem(await send('/v1/charges', { key: 'm409', json: { amount: 2 } }), 409, 'idempotency-key-reused');
      assert.equal(counter.H, 1);
    });
  });
}
