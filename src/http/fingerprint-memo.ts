import { mediaType, sha256 } from '../core/fingerprint.js';

/** What a request is remembered by: its raw parts, as they arrived (before any parsing). */
export interface RawRequestParts {
  method: string;
  /** The request URL as received (path and query, with or without origin). */
  url: string;
  contentType: string | null;
  body: Uint8Array | null;
  /** The values of `fingerprintHeaders`, in the order they are configured. */
  headerValues: readonly string[];
}

/** How many fingerprints a memo keeps by default: at most ~1 KB each (body up to 512 bytes, URL, entry), ~4 MB at most, far less for typical requests. */
export const FINGERPRINT_MEMO_SIZE = 4096;

/**
 * The fingerprints of recent requests, by their raw bytes (docs/protocol.md H29).
 *
 * A retry is almost always byte-identical to its first attempt, so its canonical fingerprint
 * (JSON parse, RFC 8785 canonical form, SHA-256; docs/protocol.md K2) was computed already:
 * this remembers it by the raw method, URL, content type, fingerprint headers and body (see
 * `rawId`), and a byte-identical request gets it without parsing its URL or body again. It is a
 * memo of a pure function (the canonical fingerprint of the same raw bytes is always the same;
 * `fingerprintProjection` must be pure): the fingerprint a request gets is the one it would
 * have got without it, and the engine still compares it with the stored one on every replay.
 * A retry that differs in any byte (reordered JSON members, another body) is a miss and is
 * canonicalised as always, so a reordered retry still replays and another body still gets 422.
 *
 * Only JSON and form bodies are remembered: for any other body the fingerprint hashes the raw
 * bytes already, and a memo would hash them twice. Bounded: the oldest entry goes first.
 */
export class FingerprintMemo {
  private readonly prints = new Map<string, Uint8Array>();

  constructor(private readonly capacity: number = FINGERPRINT_MEMO_SIZE) {}

  /**
   * What `raw` is remembered by, or undefined when it is not remembered (no body, a body the
   * fingerprint does not parse, or the memo is off). Pass it to {@link get} and {@link set}.
   */
  idOf(raw: RawRequestParts): string | undefined {
    if (!raw.body || raw.body.length === 0 || this.capacity === 0 || !memoisable(raw.contentType)) return undefined;
    return rawId(raw);
  }

  /** The fingerprint remembered for `id`. The bytes may be shared with other requests: never modify them. */
  get(id: string): Uint8Array | undefined {
    return this.prints.get(id);
  }

  /** Remembers `print` for `id`, forgetting the oldest entry when full. */
  set(id: string, print: Uint8Array): void {
    if (this.prints.size >= this.capacity) this.prints.delete(this.prints.keys().next().value as string);
    this.prints.set(id, print);
  }

  /** How many fingerprints are remembered now. */
  get size(): number {
    return this.prints.size;
  }
}

/** True for the bodies the canonical fingerprint parses: JSON (`*+json`) and forms. */
function memoisable(contentType: string | null): boolean {
  const type = mediaType(contentType);
  return type === 'application/json' || type.endsWith('+json') || type === 'application/x-www-form-urlencoded';
}

/** Bodies up to this size are part of the memo's key as they are; larger ones by their SHA-256. */
const INLINE_BODY_BYTES = 512;

/**
 * The raw parts as one string, each string field length-prefixed (so no two different requests
 * share a key), and the body byte for byte (latin1, one character a byte) when it is small, or
 * its SHA-256: small requests are compared exactly, with no hashing at all, and the memo holds at
 * most {@link INLINE_BODY_BYTES} of body per entry.
 */
function rawId(raw: RawRequestParts): string {
  const contentType = raw.contentType ?? '';
  let id = `${raw.method.length}:${raw.method}${raw.url.length}:${raw.url}${contentType.length}:${contentType}${raw.headerValues.length}:`;
  for (const value of raw.headerValues) id += `${value.length}:${value}`;
  const body = raw.body!;
  const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  return body.byteLength <= INLINE_BODY_BYTES ? `${id}=${bytes.toString('latin1')}` : `${id}#${sha256(bytes).toString('latin1')}`;
}
