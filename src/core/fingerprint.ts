import crypto, { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import { canonicalMultipart } from './multipart.js';

/** What the fingerprint is computed from (protocol.md H7). */
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
  /**
   * Projects a JSON body before it is canonicalized: returns the part of the parsed body that
   * identifies the request (e.g. a JSON-RPC envelope without its per-send `id`). Applied only
   * to JSON bodies, after `ignore`. Must be pure: the same body always projects the same way.
   */
  project?: (body: unknown) => unknown;
  /**
   * RFC 6901 JSON pointers removed from a JSON body before it is canonicalized, e.g.
   * `['/id']` for a JSON-RPC envelope. A pointer that matches nothing is ignored.
   */
  ignore?: readonly string[];
  /**
   * What a `multipart/form-data` body that does not parse gets: `'raw'` (the default) hashes its
   * bytes, as a body that is not JSON is; `'throw'` throws {@link MalformedBodyError} (the HTTP
   * layer answers it with a 400 problem before claiming anything; protocol.md H42).
   */
  malformed?: 'raw' | 'throw';
}

/** Body forms, tagged in the hash so `{"a":1}` as JSON never equals the same bytes as text. */
type BodyForm = 'empty' | 'json' | 'form' | 'multipart' | 'raw';

/**
 * SHA-256 fingerprint of a request, 32 bytes (protocol.md K2; protocol.md H7).
 *
 * Covers method, route path, the query with its pairs sorted, the selected headers and the
 * canonical body:
 * - JSON (`application/json`, `*+json`): RFC 8785 canonicalization (the `canonicalize`
 *   package), so reordered keys and `1.0` vs `1` give the same fingerprint. Numbers are
 *   IEEE-754 doubles as RFC 8785 specifies: integers beyond 2^53 that differ only past double
 *   precision compare equal. A body that does not parse as JSON is hashed as raw bytes.
 * - `application/x-www-form-urlencoded`: the decoded pairs sorted by name (stable, so repeated
 *   names keep their order), then canonicalized as JSON; `a=1&b=2` equals `b=2&a=1`, and `a=x+y`
 *   equals `a=x%20y` (protocol.md H42).
 * - `multipart/form-data`: its parts by name, filename, content type and content, sorted by name
 *   as form pairs are, without the boundary (protocol.md H42): a browser's re-post of a form has a
 *   new random boundary and the same fingerprint. One that does not parse: raw bytes, or
 *   {@link MalformedBodyError} with `malformed: 'throw'`.
 * - anything else: the raw bytes.
 *
 * Every field is length-prefixed so that no two different requests share an encoding.
 * Pure: computed once from the raw bytes before the handler runs.
 */
export function fingerprint(input: FingerprintInput): Uint8Array {
  // The fields are framed into one buffer and hashed with one update: the same bytes as a
  // length prefix and an update per field, at a fraction of the calls (the fingerprint was
  // half of idem's own CPU time on a replay; bench/notes.md).
  const query = typeof input.query === 'string' ? new URLSearchParams(input.query) : input.query;
  const queryPairs = query ? [...query] : [];
  const headers = input.headers?.length ? input.headers.map(([n, v]) => [n.toLowerCase(), v.trim()] as [string, string]) : [];
  const [form, bytes] = canonicalBody(input.contentType ?? null, input.body ?? null, projection(input), input.malformed === 'throw');
  const fields: Array<string | Uint8Array> = [
    VERSION,
    input.method.toUpperCase(),
    input.path,
    canonicalPairs(queryPairs),
    canonicalPairs(headers),
    form,
    bytes,
  ];
  let size = 0;
  for (const f of fields) size += 4 + (typeof f === 'string' ? Buffer.byteLength(f, 'utf8') : f.length);
  const framed = Buffer.allocUnsafe(size);
  let at = 0;
  for (const f of fields) {
    let length = f.length;
    if (typeof f === 'string') length = framed.write(f, at + 4, 'utf8');
    else framed.set(f, at + 4);
    framed.writeUInt32BE(length, at);
    at += 4 + length;
  }
  return new Uint8Array(sha256(framed));
}

/** SHA-256 of `bytes`: the one-shot `crypto.hash` where Node has it (20.12+), which skips building a Hash object. */
export const sha256: (bytes: Uint8Array) => Buffer =
  typeof (crypto as { hash?: unknown }).hash === 'function'
    ? (bytes) => (crypto as unknown as { hash(algorithm: string, data: Uint8Array, encoding: 'buffer'): Buffer }).hash('sha256', bytes, 'buffer')
    : (bytes) => createHash('sha256').update(bytes).digest();

/** The first field of every fingerprint: bumping it changes every fingerprint. */
const VERSION = 'idem-fingerprint-v1';

/** A fatal UTF-8 decoder (stateless between calls without `stream`, so one is shared). */
const utf8 = new TextDecoder('utf-8', { fatal: true });

function canonicalPairs(pairs: Array<[string, string]>): string {
  if (pairs.length === 0) return '[]';
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

function canonicalBody(
  contentType: string | null,
  body: Uint8Array | null,
  project: ((body: unknown) => unknown) | undefined,
  strict: boolean,
): [BodyForm, Uint8Array | string] {
  if (!body || body.length === 0) return ['empty', ''];
  const type = mediaType(contentType);
  if (type === 'application/json' || type.endsWith('+json')) {
    let parsed: unknown;
    try {
      const text = utf8.decode(body);
      parsed = JSON.parse(text);
    } catch {
      // Not JSON after all: hashed as raw bytes. The handler will reject it; the key is
      // then freed, so the fingerprint of an invalid body is never compared again.
      return ['raw', body];
    }
    // A projection that throws is a bug in the app: surfaced, never silently hashed raw.
    const value = project ? project(parsed) : parsed;
    try {
      const canonical = canonicalize(value);
      if (typeof canonical === 'string') return ['json', canonical];
    } catch {
      // A projection that returned something canonicalize refuses: raw bytes.
    }
  } else if (type === 'application/x-www-form-urlencoded') {
    try {
      const text = utf8.decode(body);
      return ['form', canonicalPairs([...new URLSearchParams(text)])];
    } catch {
      // Not UTF-8: raw bytes.
    }
  } else if (type === 'multipart/form-data') {
    try {
      return ['multipart', canonicalMultipart(contentType!, body)];
    } catch (error) {
      if (strict) throw error;
      // Not multipart after all: raw bytes, as a body that is not JSON.
    }
  }
  return ['raw', body];
}

function projection(input: FingerprintInput): ((body: unknown) => unknown) | undefined {
  const { ignore, project } = input;
  if (!ignore?.length) return project;
  const paths = ignore.map(parsePointer);
  return (body) => {
    for (const path of paths) removeAt(body, path);
    return project ? project(body) : body;
  };
}

/**
 * The reference tokens of an RFC 6901 JSON pointer (`/a/b~1c/0` → `['a', 'b/c', '0']`).
 * @throws {TypeError} for a pointer that is not empty and does not start with `/`
 */
export function parsePointer(pointer: string): string[] {
  if (typeof pointer !== 'string' || (pointer !== '' && !pointer.startsWith('/'))) {
    throw new TypeError(`Not a JSON pointer (RFC 6901): ${JSON.stringify(pointer)}`);
  }
  if (pointer === '') return [];
  return pointer
    .slice(1)
    .split('/')
    .map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/** Removes the member or element at `path` from a parsed JSON value, in place, if it is there. */
function removeAt(root: unknown, path: string[]): void {
  if (path.length === 0) return;
  let node: unknown = root;
  for (const token of path.slice(0, -1)) {
    if (node === null || typeof node !== 'object') return;
    node = (node as Record<string, unknown>)[token];
  }
  const last = path[path.length - 1]!;
  if (Array.isArray(node)) {
    if (/^(0|[1-9][0-9]*)$/.test(last) && Number(last) < node.length) node.splice(Number(last), 1);
  } else if (node !== null && typeof node === 'object' && Object.hasOwn(node, last)) {
    delete (node as Record<string, unknown>)[last];
  }
}

/** Constant-time equality of two fingerprints. */
export function sameFingerprint(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}
