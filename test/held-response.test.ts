/**
 * A response held on Node's response object (Express) is recorded straight from its parts:
 * the headers stored must be the list a web Response built of the same parts would have given
 * (`captureResponse`), and a header set a web Response would change must be refused so the
 * caller takes that path instead.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { toHeaders } from '../src/http/node/headers.js';
import { bodyResponse, captureResponse, replayHeaderFilter, storedHeaders } from '../src/http/response.js';

const keep = replayHeaderFilter();

async function viaResponse(headers: Record<string, string | number | string[]>): Promise<Array<[string, string]>> {
  const { stored } = await captureResponse(bodyResponse(201, new TextEncoder().encode('{}'), { headers: toHeaders(headers) }), keep);
  return stored.headers;
}

describe('storedHeaders', () => {
  it('keeps what captureResponse keeps from the same headers: allowed names only, in name order', async () => {
    const sets: Array<Record<string, string | number | string[]>> = [
      { 'x-powered-by': 'Express', 'content-type': 'application/json; charset=utf-8', 'content-length': 12, etag: 'W/"c-abc"' },
      { location: '/v1/orders/1', 'content-type': 'text/plain', 'set-cookie': ['a=1', 'b=2'], 'cache-control': 'no-store' },
      { 'content-language': 'de', 'content-disposition': 'inline', authorization: 'secret', date: 'Thu, 01 Jan 1970 00:00:00 GMT' },
      {},
    ];
    for (const headers of sets) assert.deepEqual(storedHeaders(headers, keep), await viaResponse(headers), JSON.stringify(headers));
  });

  it('refuses headers a web Response would not carry unchanged (joined repeats, trimmed values)', () => {
    assert.equal(storedHeaders({ 'x-a': ['1', '2'] }, keep), undefined);
    assert.equal(storedHeaders({ 'content-type': ' text/plain' }, keep), undefined);
    assert.equal(storedHeaders({ 'x-b': 'v\t' }, keep), undefined);
    assert.equal(storedHeaders({ 'set-cookie': ['a=1 '] }, keep), undefined);
    assert.deepEqual(storedHeaders({ 'set-cookie': ['a=1', 'b=2'], etag: '"x"' }, keep), [['etag', '"x"']]);
  });
});
