/**
 * The canonical fingerprint of form bodies (protocol.md H42): urlencoded pairs decoded and
 * sorted by name, multipart parts by name, filename, content type and content without the
 * boundary; a multipart body that does not parse is a 400 problem over HTTP, before any claim.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ErrorCode } from '../src/core/errors.js';
import { MalformedBodyError } from '../src/core/multipart.js';
import { fingerprint, sameFingerprint } from '../src/core/fingerprint.js';
import { parseMultipart } from '../src/core/multipart.js';
import { HttpIdempotency } from '../src/http/idempotency.js';
import { formFieldKey } from '../src/http/index.js';
import { MemoryStore } from '../src/memory/index.js';

const FORM = 'application/x-www-form-urlencoded';
const print = (contentType: string, body: string | Uint8Array) =>
  fingerprint({ method: 'POST', path: '/order', contentType, body: typeof body === 'string' ? Buffer.from(body, 'latin1') : body });
const same = (a: Uint8Array, b: Uint8Array) => sameFingerprint(a, b);

/** A multipart body as a browser writes it, with `boundary`. */
function multipart(boundary: string, parts: Array<{ name: string; filename?: string; type?: string; content: string }>, preamble = ''): string {
  let body = preamble;
  for (const p of parts) {
    body += `--${boundary}\r\nContent-Disposition: form-data; name="${p.name}"${p.filename === undefined ? '' : `; filename="${p.filename}"`}\r\n`;
    if (p.type) body += `Content-Type: ${p.type}\r\n`;
    body += `\r\n${p.content}\r\n`;
  }
  return `${body}--${boundary}--\r\n`;
}
const mp = (boundary: string) => `multipart/form-data; boundary=${boundary}`;
const ORDER = [
  { name: 'item', content: 'book' },
  { name: 'qty', content: '2' },
  { name: 'receipt', filename: 'a.txt', type: 'text/plain', content: 'line 1\r\nline 2' },
];

describe('urlencoded form bodies', () => {
  test('equivalent encodings of the same pairs fingerprint the same: + and %20, %-case, names reordered', () => {
    const a = print(FORM, 'item=red+book&qty=2&note=caf%C3%A9');
    assert.ok(same(a, print(FORM, 'item=red%20book&qty=2&note=caf%c3%a9')));
    assert.ok(same(a, print(FORM, 'qty=2&note=caf%C3%A9&item=red+book')));
    assert.ok(same(a, print(`${FORM}; charset=UTF-8`, 'item=red+book&qty=2&note=caf%C3%A9')));
  });

  test('repeated names keep their order; other values differ', () => {
    assert.ok(!same(print(FORM, 'tag=a&tag=b'), print(FORM, 'tag=b&tag=a')));
    assert.ok(!same(print(FORM, 'qty=2'), print(FORM, 'qty=3')));
    assert.ok(!same(print(FORM, 'a=1'), print('text/plain', 'a=1')), 'a form never equals the same bytes as text');
  });
});

describe('multipart form bodies', () => {
  test('the boundary is not part of the fingerprint: a re-post with a new boundary is the same request', () => {
    const a = print(mp('----geckoformboundary1111'), multipart('----geckoformboundary1111', ORDER));
    const b = print(mp('----geckoformboundary2222'), multipart('----geckoformboundary2222', ORDER));
    assert.ok(same(a, b));
    // Quoted boundary, a preamble, header names in another case: the same parts.
    const quoted = multipart('xyz', ORDER, 'preamble text\r\n').replace(/Content-Disposition/g, 'content-disposition');
    assert.ok(same(a, print('multipart/form-data; boundary="xyz"', quoted)));
    // Parts reordered by name: the same form, as urlencoded pairs are.
    assert.ok(same(a, print(mp('q'), multipart('q', [ORDER[2]!, ORDER[0]!, ORDER[1]!]))));
  });

  test('name, filename, content type and content each count', () => {
    const base = print(mp('b'), multipart('b', ORDER));
    const changed = [
      [{ name: 'item', content: 'pen' }, ORDER[1]!, ORDER[2]!],
      [ORDER[0]!, { name: 'quantity', content: '2' }, ORDER[2]!],
      [ORDER[0]!, ORDER[1]!, { ...ORDER[2]!, filename: 'b.txt' }],
      [ORDER[0]!, ORDER[1]!, { ...ORDER[2]!, type: 'application/octet-stream' }],
      [ORDER[0]!, ORDER[1]!, { ...ORDER[2]!, content: 'line 1\r\nline 3' }],
      [ORDER[0]!, ORDER[1]!, { name: 'receipt', content: 'line 1\r\nline 2' }], // no filename: a text field
      [ORDER[0]!, ORDER[1]!, { ...ORDER[2]!, filename: '' }],
    ];
    for (const parts of changed) assert.ok(!same(base, print(mp('b'), multipart('b', parts))), JSON.stringify(parts));
    // An absent Content-Type is text/plain (RFC 7578 §4.4); case and spaces in it do not count.
    assert.ok(
      same(print(mp('b'), multipart('b', [{ name: 'n', content: 'x' }])), print(mp('b'), multipart('b', [{ name: 'n', type: 'text/plain', content: 'x' }]))),
    );
    assert.ok(
      same(
        print(mp('b'), multipart('b', [{ name: 'n', type: 'Text/Plain ; Charset=UTF-8', content: 'x' }])),
        print(mp('b'), multipart('b', [{ name: 'n', type: 'text/plain;charset=utf-8', content: 'x' }])),
      ),
    );
  });

  test('binary content is kept byte for byte', () => {
    const head = Buffer.from('--b\r\nContent-Disposition: form-data; name="f"; filename="x.bin"\r\nContent-Type: application/octet-stream\r\n\r\n');
    const tail = Buffer.from('\r\n--b--\r\n');
    const body = (bytes: number[]) => Buffer.concat([head, Buffer.from(bytes), tail]);
    const [part] = parseMultipart(mp('b'), body([0, 255, 13, 10, 45, 45]));
    assert.deepEqual([...part!.content], [0, 255, 13, 10, 45, 45]);
    assert.ok(!same(print(mp('b'), body([0, 255])), print(mp('b'), body([0, 254]))));
  });

  test('an empty form (only the close delimiter) parses to no parts', () => {
    assert.deepEqual(parseMultipart(mp('b'), Buffer.from('--b--\r\n')), []);
  });

  const MALFORMED: Array<[string, string, string]> = [
    ['no boundary parameter', 'multipart/form-data', multipart('b', ORDER)],
    ['a boundary longer than 70 characters', mp('x'.repeat(71)), multipart('x'.repeat(71), ORDER)],
    ['another boundary than the body has', mp('other'), multipart('b', ORDER)],
    ['no close delimiter', mp('b'), multipart('b', ORDER).replace('--b--\r\n', '')],
    ['a part without headers', mp('b'), '--b\r\n\r\nbook\r\n--b--\r\n'],
    ['a part without the blank line', mp('b'), '--b\r\nContent-Disposition: form-data; name="a"\r\n--b--\r\n'],
    ['a part without a name', mp('b'), '--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--\r\n'],
    ['a part that is not form-data', mp('b'), '--b\r\nContent-Disposition: attachment; name="a"\r\n\r\nx\r\n--b--\r\n'],
    ['a header line without a name', mp('b'), '--b\r\nContent-Disposition: form-data; name="a"\r\nnonsense\r\n\r\nx\r\n--b--\r\n'],
  ];

  test('a body that does not parse throws MalformedBodyError with malformed: throw, and is hashed raw by default', () => {
    for (const [what, contentType, body] of MALFORMED) {
      assert.throws(
        () => fingerprint({ method: 'POST', path: '/order', contentType, body: Buffer.from(body), malformed: 'throw' }),
        (error: unknown) => error instanceof MalformedBodyError && error.code === ErrorCode.MalformedBody,
        what,
      );
      // Raw by default (queue consumers, idem/function): the same bytes, the same fingerprint.
      assert.ok(same(print(contentType, body), print(contentType, body)), what);
    }
  });

  test('over HTTP a malformed multipart body is a 400 problem before the claim: the key is not spent', async () => {
    let orders = 0;
    const idem = new HttpIdempotency({ store: new MemoryStore() });
    const post = (contentType: string, body: string) =>
      idem.handle(new Request('http://shop.test/order', { method: 'POST', headers: { 'content-type': contentType, 'idempotency-key': 'k-1' }, body }), () =>
        Response.json({ order: ++orders }, { status: 201 }),
      );
    for (const [what, contentType, body] of MALFORMED) {
      const res = await post(contentType, body);
      assert.equal(res.status, 400, what);
      assert.equal(res.headers.get('content-type'), 'application/problem+json');
      const problem = (await res.json()) as Record<string, unknown>;
      assert.equal(problem.type, 'urn:idem:problem:request-body-malformed', what);
      assert.match(String(problem.detail), /^multipart\/form-data: .*nothing was processed\.$/, what);
      assert.equal(problem.operation_state, 'not-applied');
      assert.equal(problem.safe_new_key, true);
    }
    assert.equal(orders, 0);
    // The same key with the well-formed body runs once; a re-post with another boundary replays.
    const first = await post(mp('one'), multipart('one', ORDER));
    assert.equal(first.status, 201);
    assert.deepEqual(await first.json(), { order: 1 });
    const again = await post(mp('two'), multipart('two', ORDER));
    assert.equal(again.status, 201);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(await again.json(), { order: 1 });
    // Another form under that key is a mismatch, as for any body.
    assert.equal((await post(mp('three'), multipart('three', [{ name: 'item', content: 'pen' }]))).status, 422);
    assert.equal(orders, 1);
  });
});

describe('ignoreKeyHeader: a page-set key next to the browser’s own', () => {
  const field = (request: { body: Uint8Array | null }) => new URLSearchParams(Buffer.from(request.body ?? []).toString()).get('idempotency_key') ?? undefined;
  const post = <Tx>(idem: HttpIdempotency<Tx>, body: string, header: string) =>
    idem.handle(
      new Request('http://shop.test/order', { method: 'POST', headers: { 'content-type': FORM, 'idempotency-key': header }, body }),
      () => new Response('ok', { status: 201 }),
    );

  test('without it two different keys are a 400; with it the hidden field is the key and the header is not read', async () => {
    const strict = new HttpIdempotency({ store: new MemoryStore(), getKey: field });
    assert.equal((await post(strict, 'idempotency_key=page-1&item=book', '"123"')).status, 400);
    const idem = new HttpIdempotency({ store: new MemoryStore(), getKey: field, ignoreKeyHeader: true });
    assert.equal((await post(idem, 'idempotency_key=page-1&item=book', '"123"')).status, 201);
    const again = await post(idem, 'idempotency_key=page-1&item=book', '"456"');
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
  });

  test('it needs getKey', () => {
    assert.throws(() => new HttpIdempotency({ store: new MemoryStore(), ignoreKeyHeader: true }), /ignoreKeyHeader needs getKey/);
  });
});

describe('formFieldKey: the key in a hidden field', () => {
  const request = (contentType: string, body: string) => ({
    method: 'POST',
    url: '/order',
    headers: new Headers({ 'content-type': contentType }),
    body: Buffer.from(body),
  });
  const key = formFieldKey('idempotency_key');

  test('reads it from a urlencoded or a multipart form; none when the field or the form is missing', () => {
    assert.equal(key(request(FORM, 'item=book&idempotency_key=k%201')), 'k 1');
    assert.equal(key(request(mp('b'), multipart('b', [...ORDER, { name: 'idempotency_key', content: 'k-2' }]))), 'k-2');
    // A file input of that name is no key.
    assert.equal(key(request(mp('b'), multipart('b', [{ name: 'idempotency_key', filename: 'k.txt', content: 'k-3' }]))), undefined);
    assert.equal(key(request(FORM, 'item=book')), undefined);
    assert.equal(key(request('application/json', '{"idempotency_key":"k"}')), undefined);
    assert.equal(key({ ...request(FORM, ''), body: null }), undefined);
  });

  test('a malformed multipart form is a 400 idempotency-key-invalid: nothing claimed', async () => {
    let runs = 0;
    const idem = new HttpIdempotency({ store: new MemoryStore(), getKey: key, ignoreKeyHeader: true });
    const res = await idem.handle(
      new Request('http://shop.test/order', { method: 'POST', headers: { 'content-type': mp('b') }, body: '--b\r\nnonsense' }),
      () => {
        runs++;
        return new Response('ok');
      },
    );
    assert.equal(res.status, 400);
    const problem = (await res.json()) as { type: string; detail: string };
    assert.equal(problem.type, 'urn:idem:problem:idempotency-key-invalid');
    assert.match(problem.detail, /no key field "idempotency_key" can be read: multipart\/form-data: /);
    assert.equal(runs, 0);
  });
});
