/**
 * The replayed response's headers (src/http/response.ts): a plain record that any header name
 * can be a key of, and, for a record the replay cache hands out (protocol.md K20), built once
 * and shared read-only by its replays, never changed through one of them.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { cachedReplayResponse, replayHeaders, replayResponse } from '../src/http/response.js';
import type { StoredResponse } from '../src/store/types.js';

const bytes = (text: string) => new TextEncoder().encode(text);

describe('replayed headers', () => {
  it('names such as constructor, toString and __proto__ are own keys; a repeated name is joined; the record keeps its prototype', () => {
    const stored: StoredResponse = {
      status: 200,
      headers: [
        ['constructor', 'c'],
        ['toString', 't'],
        ['__proto__', 'p'],
        ['x-a', '1'],
        ['X-A', '2'],
      ],
      body: bytes('{}'),
    };
    const headers = replayHeaders(stored);
    assert.deepEqual(Object.keys(headers), ['constructor', 'tostring', '__proto__', 'x-a', 'idempotent-replayed', 'idem-operation-state']);
    assert.deepEqual(Object.entries(headers), [
      ['constructor', 'c'],
      ['tostring', 't'],
      ['__proto__', 'p'],
      ['x-a', '1, 2'],
      ['idempotent-replayed', 'true'],
      ['idem-operation-state', 'completed'],
    ]);
    assert.equal(Object.getPrototypeOf(headers), Object.prototype, '__proto__ was defined as a key, not set as the prototype');
    assert.equal(replayResponse(stored).headers.get('x-a'), '1, 2');
  });

  it('a cached record replays the same status, bytes and headers every time; changing one replay changes neither the next nor the record', async () => {
    const stored: StoredResponse = { status: 201, headers: [['content-type', 'application/json']], body: bytes('{"ok":true}') };
    const first = cachedReplayResponse(stored);
    first.headers.set('x-later', 'one');
    first.headers.set('content-type', 'text/plain');
    const second = cachedReplayResponse(stored);
    for (const replay of [first, second]) assert.equal(replay.status, 201);
    assert.equal(second.headers.get('x-later'), null);
    assert.equal(second.headers.get('content-type'), 'application/json');
    assert.equal(second.headers.get('idempotent-replayed'), 'true');
    assert.equal(await second.text(), '{"ok":true}');
    assert.equal(await first.text(), '{"ok":true}');
    assert.deepEqual(stored.headers, [['content-type', 'application/json']]);
    const empty = cachedReplayResponse({ status: 204, headers: [], body: new Uint8Array() });
    assert.equal(empty.status, 204);
    assert.equal(empty.body, null);
  });

  it('a server whose Response keeps the header record it is given and writes to it (as @hono/node-server 1.x adds Content-Length) can replay a cached record again and again', () => {
    const real = globalThis.Response;
    const kept: Array<Record<string, string>> = [];
    class KeepingResponse {
      constructor(_body: unknown, init: { status: number; headers: Record<string, string> }) {
        init.headers['Content-Length'] = '11'; // what node-server 1.x's responseViaCache does
        kept.push(init.headers);
      }
    }
    globalThis.Response = KeepingResponse as unknown as typeof Response;
    try {
      const stored: StoredResponse = { status: 201, headers: [['content-type', 'application/json']], body: bytes('{"ok":true}') };
      for (let i = 0; i < 3; i++) cachedReplayResponse(stored);
      assert.equal(kept.length, 3);
      assert.notEqual(kept[0], kept[1], 'each replay gets its own record');
      assert.deepEqual(kept[2], {
        'content-type': 'application/json',
        'idempotent-replayed': 'true',
        'idem-operation-state': 'completed',
        'Content-Length': '11',
      });
    } finally {
      globalThis.Response = real;
    }
  });
});
