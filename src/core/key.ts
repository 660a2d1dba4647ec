import { parseItem } from 'structured-headers';
import { MAX_KEY_LENGTH } from './constants.js';
import { InvalidKeyError } from './errors.js';

/** Printable ASCII, 0x20-0x7E (protocol.md H5). */
const PRINTABLE_ASCII = /^[\x20-\x7e]+$/;

/**
 * Parses the value(s) of an `Idempotency-Key` header into the key.
 *
 * Accepts both forms seen in the wild as the same key (protocol.md H4):
 * - an sf-string, as draft-ietf-httpapi-idempotency-key-header §2 specifies (`"8e03978e"`),
 *   parsed with RFC 9651 rules; parameters are rejected;
 * - a bare value, as Stripe and most SDKs send it (`8e03978e`).
 *
 * A bare key given as a string may not contain `,`: fetch `Headers` joins several header
 * lines with `, `, so there a comma is indistinguishable from a second line. Given as an
 * array of lines (Node's `req.headersDistinct`, used by the Express adapter), it may.
 *
 * @param value the header value; an array when the runtime exposes header lines separately
 *   (Node's `req.headersDistinct`), `null`/`undefined` when absent.
 * @returns the key (1-255 printable ASCII characters, never truncated), or `undefined` when no
 *   header was sent.
 * @throws {InvalidKeyError} empty, longer than 255, control or non-ASCII characters, a
 *   malformed sf-string, or more than one header line.
 */
export function parseIdempotencyKey(value: string | readonly string[] | null | undefined): string | undefined {
  if (value === null || value === undefined) return undefined;
  // When the runtime keeps header lines apart, a comma is just a character of the key.
  let linesKnown = false;
  if (typeof value !== 'string') {
    if (value.length === 0) return undefined;
    if (value.length > 1) throw new InvalidKeyError('Send exactly one Idempotency-Key header line');
    value = value[0] as string;
    linesKnown = true;
  }
  // HTTP strips optional whitespace around field values (RFC 9110 §5.5).
  const raw = value.replace(/^[ \t]+|[ \t]+$/g, '');
  if (raw.length === 0) throw new InvalidKeyError('The idempotency key is empty; send 1-255 printable ASCII characters');
  if (raw.startsWith('"')) {
    let item: ReturnType<typeof parseItem>;
    try {
      item = parseItem(raw);
    } catch (cause) {
      throw new InvalidKeyError('The idempotency key is not a valid sf-string (RFC 9651 §3.3.3)', { cause });
    }
    const [bare, params] = item;
    if (typeof bare !== 'string') throw new InvalidKeyError('The idempotency key must be an sf-string or a bare token');
    if (params.size > 0) throw new InvalidKeyError('The idempotency key must not carry sf-parameters');
    return validateKey(bare);
  }
  if (!linesKnown && raw.includes(',')) {
    throw new InvalidKeyError('Send exactly one Idempotency-Key header line (a bare key may not contain ",")');
  }
  return validateKey(raw);
}

/**
 * Checks that a key taken from anywhere (header, body field, code) is 1-255 printable ASCII
 * characters. Never truncates.
 *
 * @returns the key unchanged
 * @throws {InvalidKeyError} when it is not
 */
export function validateKey(key: unknown): string {
  if (typeof key !== 'string') throw new InvalidKeyError('The idempotency key must be a string');
  if (key.length === 0) throw new InvalidKeyError('The idempotency key is empty; send 1-255 printable ASCII characters');
  if (key.length > MAX_KEY_LENGTH) {
    throw new InvalidKeyError(`The idempotency key is ${key.length} characters long; the limit is ${MAX_KEY_LENGTH}`);
  }
  if (!PRINTABLE_ASCII.test(key)) {
    throw new InvalidKeyError('The idempotency key may contain only printable ASCII characters (0x20-0x7E)');
  }
  return key;
}
