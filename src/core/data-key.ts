import { createHash } from 'node:crypto';
import { MAX_KEY_LENGTH } from './constants.js';
import { InvalidKeyError } from './errors.js';

/** What starts a key mapped from data (protocol.md K47). */
export const DATA_KEY_PREFIX = 'sha256:';

/** A key the stores hold as it is: 1-255 printable ASCII (protocol.md H5). */
const STORED_FORM = /^[\x20-\x7e]{1,255}$/;

/**
 * The stored key of a key taken from data: a record's field, a message id, a function's
 * argument, a webhook's delivery id (protocol.md K47). Any non-empty string is a key:
 * - 1-255 printable ASCII characters: the key as it is (what the HTTP header allows, H5);
 * - anything else (longer, non-ASCII as `customer#Zoë` or `Straße`, control characters):
 *   `sha256:` and the 64 hex digits of the SHA-256 of its UTF-8 bytes, 71 characters. A
 *   string with a lone surrogate (a sliced emoji) is hashed over its WTF-8 bytes, so it keeps a
 *   key of its own. No Unicode normalization: a composed and a decomposed `ë` are two keys.
 *
 * The same on every store, pure and stable across versions. Two keys share a stored key only
 * if SHA-256 collides, or if one of them is itself the literal `sha256:<hex>` of the other:
 * data that never looks so by chance, and that whoever controls a whole key could bypass by
 * sending the other key itself.
 *
 * @returns the stored key, 1-255 printable ASCII characters
 * @throws {InvalidKeyError} the key is not a string, or is empty
 */
export function dataKey(key: unknown): string {
  if (typeof key !== 'string') {
    throw new InvalidKeyError(`The idempotency key must be a string, not ${key === null ? 'null' : typeof key}`);
  }
  if (key.length === 0) throw new InvalidKeyError('The idempotency key is empty; a key from data needs at least one character');
  if (key.length <= MAX_KEY_LENGTH && STORED_FORM.test(key)) return key;
  return `${DATA_KEY_PREFIX}${createHash('sha256').update(wtf8(key)).digest('hex')}`;
}

/**
 * UTF-8 of a string; a lone surrogate encoded as its own 3 bytes (WTF-8) instead of U+FFFD, so
 * two strings never share bytes. The same bytes as UTF-8 for every well-formed string.
 */
function wtf8(text: string): Uint8Array {
  if (!/[\ud800-\udfff]/.test(text)) return Buffer.from(text, 'utf8');
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const point = text.codePointAt(i)!;
    if (point > 0xffff) i++;
    if (point < 0x80) bytes.push(point);
    else if (point < 0x800) bytes.push(0xc0 | (point >> 6), 0x80 | (point & 0x3f));
    else if (point < 0x10000) bytes.push(0xe0 | (point >> 12), 0x80 | ((point >> 6) & 0x3f), 0x80 | (point & 0x3f));
    else bytes.push(0xf0 | (point >> 18), 0x80 | ((point >> 12) & 0x3f), 0x80 | ((point >> 6) & 0x3f), 0x80 | (point & 0x3f));
  }
  return Uint8Array.from(bytes);
}
