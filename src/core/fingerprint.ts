import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';

/** What the fingerprint is computed from (conformance 7). */
export interface FingerprintInput {
  /** HTTP method; compared upper-cased. */
  method: string;
  /** Route path, e.g. `/v1/charges`. */
  path: string;
  /** Raw query string without `?` (`b=2&a=1`), or already-parsed params; order does not matter. */
  query?: string | URLSearchParams;
  /** The request's `Content-Type`; selects the canonical form of the body. */
  contentType?: string | null;
  /** Raw request body bytes; `null`/empty for none. */
  body?: Uint8Array | null;
  /**
   * Extra request headers that change the meaning of a request (for example an API version),
   * as `[name, value]`. Volatile headers (User-Agent, tracing, Date) must not be listed.
   */
  headers?: ReadonlyArray<readonly [string, string]>;
}

/** Body forms, tagged in the hash so `{"a":1}` as JSON never equals the same bytes as text. */
type BodyForm = 'empty' | 'json' | 'form' | 'raw';

/**
 * SHA-256 fingerprint of a request, 32 bytes (seed step 2; conformance 7).
 *
 * Covers method, route path, the query with its pairs sorted, the selected headers and the
 * canonical body:
 * - JSON (`application/json`, `*+json`): RFC 8785 canonicalization (the `canonicalize`
 *   package), so reordered keys and `1.0` vs `1` give the same fingerprint. Numbers are
 *   IEEE-754 doubles as RFC 8785 specifies: integers beyond 2^53 that differ only past double
 *   precision compare equal. A body that does not parse as JSON is hashed as raw bytes.
 * - `application/x-www-form-urlencoded`: the decoded pairs sorted by name (stable, so repeated
 *   names keep their order), then canonicalized as JSON; `a=1&b=2` equals `b=2&a=1`.
 * - anything else: the raw bytes.
 *
 * Every field is length-prefixed so that no two different requests share an encoding.
 * Pure: computed once from the raw bytes before the handler runs.
 */
export function fingerprint(input: FingerprintInput): Uint8Array {
  const hash = createHash('sha256');
  const field = (s: string | Uint8Array): void => {
    const bytes = typeof s === 'string' ? Buffer.from(s, 'utf8') : s;
    const len = Buffer.alloc(4);
    len.writeUInt32BE(bytes.length);
    hash.update(len);
    hash.update(bytes);
  };
  field('idem-fingerprint-v1');
  field(input.method.toUpperCase());
  field(input.path);
  const query = typeof input.query === 'string' ? new URLSearchParams(input.query) : (input.query ?? new URLSearchParams());
  field(canonicalPairs([...query]));
  const headers = (input.headers ?? []).map(([n, v]) => [n.toLowerCase(), v.trim()] as [string, string]);
  field(canonicalPairs(headers));
  const [form, bytes] = canonicalBody(input.contentType ?? null, input.body ?? null);
  field(form);
  field(bytes);
  return new Uint8Array(hash.digest());
}

function canonicalPairs(pairs: Array<[string, string]>): string {
  const sorted = pairs
    .map((p, i) => [p, i] as const)
    .sort((a, b) => (a[0][0] < b[0][0] ? -1 : a[0][0] > b[0][0] ? 1 : a[1] - b[1]))
    .map(([p]) => p);
  return canonicalize(sorted) as string;
}

/** The media type of a Content-Type value, lower-cased, without parameters. */
export function mediaType(contentType: string | null | undefined): string {
  return (contentType ?? '').split(';', 1)[0]!.trim().toLowerCase();
}

/** True for `application/json` and any `+json` structured syntax suffix (RFC 6839). */
export function isJsonMediaType(contentType: string | null | undefined): boolean {
  const type = mediaType(contentType);
  return type === 'application/json' || type.endsWith('+json');
}

function canonicalBody(contentType: string | null, body: Uint8Array | null): [BodyForm, Uint8Array | string] {
  if (!body || body.length === 0) return ['empty', ''];
  const type = mediaType(contentType);
  if (isJsonMediaType(type)) {
    try {
      const text = new TextDecoder('utf-8', { fatal: true }).decode(body);
      const canonical = canonicalize(JSON.parse(text));
      if (typeof canonical === 'string') return ['json', canonical];
    } catch {
      // Not JSON after all: fall through to raw bytes. The handler will reject it; the key
      // is then freed, so the fingerprint of an invalid body is never compared again.
    }
  } else if (type === 'application/x-www-form-urlencoded') {
    try {
      const text = new TextDecoder('utf-8', { fatal: true }).decode(body);
      return ['form', canonicalPairs([...new URLSearchParams(text)])];
    } catch {
      // Not UTF-8: raw bytes.
    }
  }
  return ['raw', body];
}

/** Constant-time equality of two fingerprints. */
export function sameFingerprint(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}
