/**
 * The pure core: key parsing, request fingerprint, the decision after a failed claim and
 * derived keys for downstream calls. No database.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseIdempotencyKey, validateKey } from '../src/core/key.js';
import { fingerprint, sameFingerprint, type FingerprintInput } from '../src/core/fingerprint.js';
import { decide, type ExistingKey } from '../src/core/decide.js';
import { deriveKey } from '../src/core/derived-key.js';
import { KeyState } from '../src/core/constants.js';
import { ErrorCode, IdempotencyError, InvalidKeyError } from '../src/core/errors.js';

const utf8 = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'utf8'));
const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');

/** Asserts that `fn` throws an InvalidKeyError with its stable code. */
function assertInvalidKey(fn: () => unknown): void {
  assert.throws(fn, (error: unknown) => {
    assert.ok(error instanceof InvalidKeyError, `expected InvalidKeyError, got ${String(error)}`);
    assert.ok(error instanceof IdempotencyError, 'error instanceof IdempotencyError');
    assert.equal(error.code, ErrorCode.InvalidKey);
    return true;
  });
}

describe('parseIdempotencyKey', () => {
  it('accepts a bare token as the key', () => {
    assert.equal(parseIdempotencyKey('8e03978e-40d5-43e8-bc93-6894a57f9324'), '8e03978e-40d5-43e8-bc93-6894a57f9324');
  });

  it('treats an sf-string "abc" as the same key as bare abc', () => {
    assert.equal(parseIdempotencyKey('"abc"'), 'abc');
    assert.equal(parseIdempotencyKey('"abc"'), parseIdempotencyKey('abc'));
  });

  it('unescapes an sf-string with an escaped quote and backslash', () => {
    assert.equal(parseIdempotencyKey('"a\\"b\\\\c"'), 'a"b\\c');
  });

  it('strips surrounding spaces and tabs, for both forms', () => {
    assert.equal(parseIdempotencyKey('  abc \t'), 'abc');
    assert.equal(parseIdempotencyKey('\t"abc"  '), 'abc');
  });

  it('keeps inner spaces of a bare key (printable ASCII)', () => {
    assert.equal(parseIdempotencyKey('a b'), 'a b');
  });

  it('returns undefined when no header was sent', () => {
    assert.equal(parseIdempotencyKey(undefined), undefined);
    assert.equal(parseIdempotencyKey(null), undefined);
    assert.equal(parseIdempotencyKey([]), undefined);
  });

  it('rejects an empty or whitespace-only value', () => {
    assertInvalidKey(() => parseIdempotencyKey(''));
    assertInvalidKey(() => parseIdempotencyKey('   '));
    assertInvalidKey(() => parseIdempotencyKey('""'));
  });

  it('accepts 255 characters unchanged and rejects 256 (never truncates)', () => {
    const k255 = 'k'.repeat(255);
    assert.equal(parseIdempotencyKey(k255), k255);
    assert.equal(parseIdempotencyKey(`"${k255}"`), k255);
    assertInvalidKey(() => parseIdempotencyKey('k'.repeat(256)));
    assertInvalidKey(() => parseIdempotencyKey(`"${'k'.repeat(256)}"`));
  });

  it('rejects control characters', () => {
    assertInvalidKey(() => parseIdempotencyKey('ab\x01c'));
    assertInvalidKey(() => parseIdempotencyKey('ab\x7fc'));
    assertInvalidKey(() => parseIdempotencyKey('ab\ncd'));
    assertInvalidKey(() => parseIdempotencyKey('a\tb'));
  });

  it('rejects non-ASCII characters, bare or in an sf-string', () => {
    assertInvalidKey(() => parseIdempotencyKey('clé'));
    assertInvalidKey(() => parseIdempotencyKey('"clé"'));
    assertInvalidKey(() => parseIdempotencyKey('key-😀'));
  });

  it('rejects a malformed sf-string', () => {
    assertInvalidKey(() => parseIdempotencyKey('"abc'));
    assertInvalidKey(() => parseIdempotencyKey('"abc"def'));
    assertInvalidKey(() => parseIdempotencyKey('"a\\qb"'));
  });

  it('rejects an sf-string with parameters', () => {
    assertInvalidKey(() => parseIdempotencyKey('"abc";a=1'));
    assertInvalidKey(() => parseIdempotencyKey('"abc";v'));
  });

  it('rejects two header lines', () => {
    assertInvalidKey(() => parseIdempotencyKey(['abc', 'abc']));
    assertInvalidKey(() => parseIdempotencyKey(['"a"', '"b"']));
  });

  it('accepts a single header line given as an array', () => {
    assert.equal(parseIdempotencyKey(['abc']), 'abc');
    assert.equal(parseIdempotencyKey(['"abc"']), 'abc');
  });

  it('rejects a bare value with a comma (two joined header lines)', () => {
    assertInvalidKey(() => parseIdempotencyKey('abc, def'));
    assertInvalidKey(() => parseIdempotencyKey('abc,def'));
    assertInvalidKey(() => parseIdempotencyKey('"abc", "def"'));
  });

  it('allows a comma inside one sf-string', () => {
    assert.equal(parseIdempotencyKey('"a,b"'), 'a,b');
  });

  it('accepts a comma in a bare key given as one header line (lines known), but not in a string (lines joined)', () => {
    assert.equal(parseIdempotencyKey(['a,b']), 'a,b');
    assert.equal(parseIdempotencyKey(['abc, def']), 'abc, def', 'kept whole, inner space included');
    assert.equal(parseIdempotencyKey([' a,b\t']), 'a,b', 'surrounding whitespace still stripped');
    assertInvalidKey(() => parseIdempotencyKey('a,b'));
    assertInvalidKey(() => parseIdempotencyKey(['a,b', 'c']));
    assertInvalidKey(() => parseIdempotencyKey(['"a", "b"'])); // two sf-strings in one line are still not one key
    assertInvalidKey(() => parseIdempotencyKey(['a,\u00e9'])); // validated like any key: printable ASCII
  });
});

describe('validateKey', () => {
  it('returns a valid key unchanged and rejects non-strings', () => {
    assert.equal(validateKey('abc'), 'abc');
    assertInvalidKey(() => validateKey(42));
    assertInvalidKey(() => validateKey(undefined));
    assertInvalidKey(() => validateKey(''));
    assertInvalidKey(() => validateKey('x'.repeat(256)));
    assertInvalidKey(() => validateKey('a\u0000b'));
  });
});

describe('fingerprint', () => {
  const json = (body: string, extra: Partial<FingerprintInput> = {}): Uint8Array =>
    fingerprint({ method: 'POST', path: '/v1/charges', contentType: 'application/json', body: utf8(body), ...extra });
  const same = (a: Uint8Array, b: Uint8Array) => assert.equal(hex(a), hex(b));
  const differ = (a: Uint8Array, b: Uint8Array) => assert.notEqual(hex(a), hex(b));

  it('is 32 bytes and deterministic', () => {
    const a = json('{"amount":100}');
    assert.equal(a.length, 32);
    same(a, json('{"amount":100}'));
  });

  it('is equal for reordered JSON keys, nested too, and insignificant whitespace', () => {
    same(json('{"a":1,"b":{"x":1,"y":[1,2]}}'), json('{ "b": { "y": [1, 2], "x": 1 }, "a": 1 }'));
  });

  it('is equal for 1.0 and 1 in JSON', () => {
    same(json('{"amount":1.0}'), json('{"amount":1}'));
    same(json('{"amount":1e2}'), json('{"amount":100}'));
  });

  it('differs for a different JSON value', () => {
    differ(json('{"amount":100}'), json('{"amount":101}'));
    differ(json('{"amount":100}'), json('{"amount":"100"}'));
    differ(json('[1,2]'), json('[2,1]'));
  });

  it('differs by method, path and query', () => {
    const base = json('{"a":1}');
    differ(base, json('{"a":1}', { method: 'PATCH' }));
    differ(base, json('{"a":1}', { path: '/v1/refunds' }));
    differ(base, json('{"a":1}', { query: 'x=1' }));
    differ(json('{"a":1}', { query: 'x=1' }), json('{"a":1}', { query: 'x=2' }));
  });

  it('compares the method case-insensitively', () => {
    same(json('{"a":1}', { method: 'post' }), json('{"a":1}', { method: 'POST' }));
  });

  it('ignores the order of query parameters, string or URLSearchParams', () => {
    same(json('{}', { query: 'b=2&a=1' }), json('{}', { query: 'a=1&b=2' }));
    same(json('{}', { query: 'a=1&b=2' }), json('{}', { query: new URLSearchParams('b=2&a=1') }));
    same(json('{}', { query: '' }), json('{}'));
  });

  it('keeps the order of repeated query parameters', () => {
    differ(json('{}', { query: 'a=1&a=2' }), json('{}', { query: 'a=2&a=1' }));
  });

  it('is equal for reordered form-urlencoded pairs, but keeps the order of a repeated name', () => {
    const form = (body: string) =>
      fingerprint({ method: 'POST', path: '/f', contentType: 'application/x-www-form-urlencoded; charset=utf-8', body: utf8(body) });
    same(form('a=1&b=2'), form('b=2&a=1'));
    same(form('a=1&b=2&a=3'), form('b=2&a=1&a=3'));
    differ(form('a=1&a=3'), form('a=3&a=1'));
    differ(form('a=1&b=2'), form('a=1&b=3'));
  });

  it('differs for the same bytes sent as JSON and as text', () => {
    const body = utf8('{"a":1}');
    differ(
      fingerprint({ method: 'POST', path: '/p', contentType: 'application/json', body }),
      fingerprint({ method: 'POST', path: '/p', contentType: 'text/plain', body }),
    );
  });

  it('falls back to the raw bytes, deterministically, for invalid JSON', () => {
    same(json('{"a":'), json('{"a":'));
    // Raw bytes: whitespace now matters, unlike for valid JSON.
    differ(json('{"a": '), json('{"a":'));
    // Invalid UTF-8 under a JSON content type is hashed raw too, without throwing.
    const bad = new Uint8Array([0x7b, 0xff, 0x7d]);
    const f = () => fingerprint({ method: 'POST', path: '/p', contentType: 'application/json', body: bad });
    same(f(), f());
  });

  it('canonicalizes +json media types like application/json', () => {
    const vnd = (body: string, contentType = 'application/vnd.x+json') => fingerprint({ method: 'POST', path: '/p', contentType, body: utf8(body) });
    same(vnd('{"a":1,"b":2}'), vnd('{"b":2,"a":1.0}'));
    same(vnd('{"a":1,"b":2}'), vnd('{"b":2,"a":1}', 'application/json'));
    same(vnd('{"a":1}', 'Application/JSON; charset=utf-8'), vnd('{"a":1}', 'application/json'));
  });

  it('hashes other content types as raw bytes', () => {
    const text = (body: string) => fingerprint({ method: 'POST', path: '/p', contentType: 'text/plain', body: utf8(body) });
    differ(text('{"a":1,"b":2}'), text('{"b":2,"a":1}'));
  });

  it('changes with a selected header, with the header name case-insensitive', () => {
    const withHeaders = (headers?: Array<[string, string]>) => json('{"a":1}', headers ? { headers } : {});
    differ(withHeaders(), withHeaders([['Stripe-Version', '2024-06-20']]));
    differ(withHeaders([['stripe-version', '2024-06-20']]), withHeaders([['stripe-version', '2025-01-01']]));
    same(withHeaders([['Stripe-Version', '2024-06-20']]), withHeaders([['stripe-version', '2024-06-20']]));
    same(
      withHeaders([
        ['a', '1'],
        ['b', '2'],
      ]),
      withHeaders([
        ['B', '2'],
        ['A', '1'],
      ]),
    );
  });

  it('is equal for an empty body and a null or missing body', () => {
    const bodyless = (extra: Partial<FingerprintInput>) => fingerprint({ method: 'POST', path: '/p', ...extra });
    same(bodyless({ body: new Uint8Array(0) }), bodyless({ body: null }));
    same(bodyless({ body: null }), bodyless({}));
    same(bodyless({ body: new Uint8Array(0), contentType: 'application/json' }), bodyless({}));
    differ(bodyless({}), bodyless({ body: utf8('x'), contentType: 'text/plain' }));
  });

  it('never lets one field run into the next', () => {
    differ(fingerprint({ method: 'POST', path: '/ab' }), fingerprint({ method: 'POST', path: '/a', query: 'b' }));
  });
});

describe('sameFingerprint', () => {
  it('compares bytes, including length', () => {
    assert.equal(sameFingerprint(new Uint8Array([1, 2]), new Uint8Array([1, 2])), true);
    assert.equal(sameFingerprint(new Uint8Array([1, 2]), new Uint8Array([1, 3])), false);
    assert.equal(sameFingerprint(new Uint8Array([1, 2]), new Uint8Array([1, 2, 0])), false);
  });
});

describe('decide', () => {
  const fp = new Uint8Array(32).fill(7);
  const other = new Uint8Array(32).fill(8);
  const row = (state: KeyState, leaseExpired: boolean, fingerprint = fp): ExistingKey => ({ state, fingerprint, leaseExpired });

  const table: Array<[string, ExistingKey, Uint8Array, string]> = [
    ['done, same fingerprint → replay', row(KeyState.Done, true), fp, 'replay'],
    ['done, same fingerprint, lease field false → replay', row(KeyState.Done, false), fp, 'replay'],
    ['started, lease valid → in-progress', row(KeyState.Started, false), fp, 'in-progress'],
    ['started, lease expired → take-over', row(KeyState.Started, true), fp, 'take-over'],
    ['done, different fingerprint → mismatch (before replay)', row(KeyState.Done, true), other, 'mismatch'],
    ['started, lease valid, different fingerprint → mismatch (before in-progress)', row(KeyState.Started, false), other, 'mismatch'],
    ['started, lease expired, different fingerprint → mismatch (never take-over)', row(KeyState.Started, true), other, 'mismatch'],
    ['fingerprint of a different length → mismatch', row(KeyState.Started, false), fp.subarray(0, 31), 'mismatch'],
  ];
  for (const [name, existing, request, expected] of table) {
    it(name, () => {
      assert.deepEqual(decide(existing, request), { kind: expected });
    });
  }
});

describe('deriveKey', () => {
  const CLAIM = '0b7f6c2e-4a51-4c7e-9d3a-5f0e8a1b2c3d';
  const OTHER_CLAIM = '6a1d9e40-2b3c-4f5d-8e6f-7a8b9c0d1e2f';

  it('is stable for the same scope, key, claim and name', () => {
    assert.equal(deriveKey('tenant-1', 'abc', CLAIM, 'psp_charge'), deriveKey('tenant-1', 'abc', CLAIM, 'psp_charge'));
  });

  it('differs per scope, per key, per claim and per name', () => {
    const base = deriveKey('tenant-1', 'abc', CLAIM, 'psp_charge');
    assert.notEqual(base, deriveKey('tenant-2', 'abc', CLAIM, 'psp_charge'));
    assert.notEqual(base, deriveKey('tenant-1', 'abd', CLAIM, 'psp_charge'));
    assert.notEqual(base, deriveKey('tenant-1', 'abc', OTHER_CLAIM, 'psp_charge'));
    assert.notEqual(base, deriveKey('tenant-1', 'abc', CLAIM, 'psp_refund'));
  });

  it('a key claimed anew (new claim id) gets a different derived key for every name', () => {
    for (const name of ['authorize', 'psp_charge', 'n']) {
      assert.notEqual(deriveKey('t', 'k', CLAIM, name), deriveKey('t', 'k', OTHER_CLAIM, name), name);
    }
  });

  it('does not confuse scope, key and claim boundaries', () => {
    assert.notEqual(deriveKey('ab', 'c', CLAIM, 'n'), deriveKey('a', 'bc', CLAIM, 'n'));
    assert.notEqual(deriveKey('t', 'kx', 'y', 'n'), deriveKey('t', 'k', 'xy', 'n'));
  });

  it('starts with the name and is printable ASCII within 255 characters', () => {
    const longest = deriveKey('s'.repeat(255), 'k'.repeat(255), CLAIM, 'n'.repeat(64));
    for (const derived of [deriveKey('t', 'k', CLAIM, 'authorize'), longest]) {
      assert.match(derived, /^[\x21-\x7e]+$/);
      assert.ok(derived.length <= 255, `${derived.length} characters`);
    }
    assert.ok(deriveKey('t', 'k', CLAIM, 'authorize').startsWith('authorize:'), 'starts with the name');
    assert.ok(longest.length <= 108, `${longest.length} characters`);
  });

  it('does not contain the client key or the claim id verbatim', () => {
    const derived = deriveKey('t', 'secret-client-key', CLAIM, 'n');
    assert.ok(!derived.includes('secret-client-key'), 'the client key is hashed');
    assert.ok(!derived.includes(CLAIM), 'the claim id is hashed');
  });
});
