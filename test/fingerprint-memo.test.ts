/**
 * The fingerprint memo (docs/protocol.md H29): a byte-identical retry gets the fingerprint
 * remembered by its raw bytes, never one of another request; the fingerprint is still compared
 * on every replay (a reordered retry replays, another body, path, query, method, content type
 * or fingerprint header gets 422), with the memo on and off.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidOptionError } from '../src/core/errors.js';
import { FingerprintMemo, type RawRequestParts } from '../src/http/fingerprint-memo.js';
import { HttpIdempotency } from '../src/http/idempotency.js';
import { MemoryStore } from '../src/memory/index.js';

const utf8 = (text: string) => new TextEncoder().encode(text);

describe('FingerprintMemo: what a request is remembered by', () => {
  const base: RawRequestParts = {
    method: 'POST',
    url: 'http://api.test/v1/charges?expand=customer',
    contentType: 'application/json',
    body: utf8('{"amount":100}'),
    headerValues: ['2024-06-01'],
  };
  const memo = new FingerprintMemo();

  it('is the same for the same raw bytes, whatever object carries them', () => {
    const copy = { ...base, body: new Uint8Array([...base.body!]), headerValues: [...base.headerValues] };
    assert.equal(memo.idOf(copy), memo.idOf(base));
  });

  it('differs when any raw part differs, including a byte of a large (hashed) body', () => {
    const large = utf8(JSON.stringify({ text: 'x'.repeat(2000) }));
    const largeOther = new Uint8Array(large);
    largeOther[1000] = 'y'.charCodeAt(0);
    const variants: RawRequestParts[] = [
      base,
      { ...base, method: 'PUT' },
      { ...base, url: 'http://api.test/v1/charges?expand=invoice' },
      { ...base, url: 'http://api.test/v1/refunds?expand=customer' },
      { ...base, contentType: 'application/merge-patch+json' },
      { ...base, body: utf8('{"amount":200}') },
      { ...base, body: utf8('{"amount": 100}') },
      { ...base, headerValues: ['2025-01-01'] },
      { ...base, headerValues: ['2024-06-01', ''] },
      // The same characters split differently between two fields.
      { ...base, method: 'POSTh', url: 'ttp://api.test/v1/charges?expand=customer' },
      { ...base, headerValues: ['2024-06-', '01'] },
      { ...base, body: large },
      { ...base, body: largeOther },
    ];
    const ids = variants.map((v) => memo.idOf(v));
    for (const id of ids) assert.equal(typeof id, 'string');
    assert.equal(new Set(ids).size, variants.length);
  });

  it('remembers JSON and form bodies only, never an empty body, and nothing when its size is 0', () => {
    assert.equal(memo.idOf({ ...base, contentType: 'text/plain' }), undefined);
    assert.equal(memo.idOf({ ...base, contentType: null }), undefined);
    assert.equal(memo.idOf({ ...base, body: null }), undefined);
    assert.equal(memo.idOf({ ...base, body: new Uint8Array(0) }), undefined);
    assert.equal(typeof memo.idOf({ ...base, contentType: 'application/x-www-form-urlencoded', body: utf8('a=1') }), 'string');
    assert.equal(new FingerprintMemo(0).idOf(base), undefined);
  });

  it('keeps at most its capacity, forgetting the oldest first', () => {
    const small = new FingerprintMemo(2);
    const print = (n: number) => new Uint8Array(32).fill(n);
    const ids = [1, 2, 3].map((n) => small.idOf({ ...base, body: utf8(`{"n":${n}}`) })!);
    for (const [i, id] of ids.entries()) small.set(id, print(i + 1));
    assert.equal(small.size, 2);
    assert.equal(small.get(ids[0]!), undefined);
    assert.deepEqual(small.get(ids[2]!), print(3));
  });
});

describe('HttpIdempotency with the fingerprint memo: the fingerprint is compared on every replay', () => {
  for (const fingerprintMemo of [undefined, 0]) {
    const label = fingerprintMemo === 0 ? 'memo off' : 'memo on (default)';
    const app = () => {
      let runs = 0;
      const core = new HttpIdempotency({
        store: new MemoryStore(),
        fingerprintHeaders: ['api-version'],
        ...(fingerprintMemo === undefined ? {} : { fingerprintMemo }),
      });
      const send = (body: string, { path = '/v1/charges', version = '1', type = 'application/json' } = {}) =>
        core.handle(
          new Request(`http://api.test${path}`, { method: 'POST', headers: { 'idempotency-key': 'k-1', 'content-type': type, 'api-version': version }, body }),
          () => new Response(JSON.stringify({ run: ++runs }), { status: 201, headers: { 'content-type': 'application/json' } }),
        );
      return { send, runs: () => runs };
    };

    it(`${label}: byte-identical retries and a reordered retry replay; the handler ran once`, async () => {
      const { send, runs } = app();
      const body = '{"amount":100,"currency":"eur"}';
      assert.equal((await send(body)).status, 201);
      for (const retry of [body, '{ "currency": "eur", "amount": 100.0 }', body, '{ "currency": "eur", "amount": 100.0 }']) {
        const replayed = await send(retry);
        assert.equal(replayed.status, 201);
        assert.equal(replayed.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(await replayed.json(), { run: 1 });
      }
      assert.equal(runs(), 1);
    });

    it(`${label}: after remembered retries, another body, path, content type or fingerprint header gets 422`, async () => {
      const { send, runs } = app();
      const body = '{"amount":100}';
      assert.equal((await send(body)).status, 201);
      assert.equal((await send(body)).status, 201); // remembered now
      for (const [other, options] of [
        ['{"amount":200}', {}],
        [body, { path: '/v1/refunds' }],
        [body, { version: '2' }],
        [body, { type: 'application/x-www-form-urlencoded' }],
      ] as const) {
        assert.equal((await send(other, options)).status, 422, `${other} ${JSON.stringify(options)}`);
      }
      assert.equal((await send(body)).status, 201);
      assert.equal(runs(), 1);
    });
  }

  it('refuses a fingerprintMemo that is not a whole number >= 0', () => {
    for (const bad of [-1, 1.5, Number.NaN]) {
      assert.throws(() => new HttpIdempotency({ store: new MemoryStore(), fingerprintMemo: bad }), InvalidOptionError);
    }
  });
});
