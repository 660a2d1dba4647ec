import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { InvalidOptionError, ResponseUnreadableError, UnknownKeyIdError } from './errors.js';

/**
 * Encryption at rest of stored responses: AES-256-GCM (NIST SP 800-38D) via node:crypto, with
 * key ids for rotation. A store seals a response before writing it and opens it on replay;
 * nothing else in idem sees ciphertext.
 *
 * Sealed value (version 1), as stored in the body column, the blob, or the headers:
 * ```
 * 0x01 | n (1 byte) | key id (n bytes, ASCII) | IV (12 random bytes) | tag (16 bytes) | ciphertext
 * ```
 * The additional authenticated data (AAD) is the value's header (version and key id) plus the
 * row it belongs to (scope, key) and which part it is (`body` or `headers`): a ciphertext
 * copied to another row, or a body swapped for headers, fails authentication instead of
 * replaying another request's response.
 */
export interface ResponseCipher {
  /** Key id that {@link seal} uses. */
  readonly currentKeyId: string;
  /** Encrypts `plain` under the current key, bound to `aad`. */
  seal(plain: Uint8Array, aad: Uint8Array): Uint8Array;
  /**
   * Decrypts a value sealed by {@link seal} (under any configured key id).
   * @throws {UnknownKeyIdError} the value names a key id that is not configured
   * @throws {ResponseUnreadableError} malformed, tampered, or sealed for another row/part
   */
  open(sealed: Uint8Array, aad: Uint8Array): Uint8Array;
}

/** Options of {@link aesGcmCipher}. */
export interface EncryptionOptions {
  /**
   * Keys by key id: 32 bytes each, as a Buffer/Uint8Array or a base64 string
   * (`openssl rand -base64 32`). Key ids are 1-64 characters of `[A-Za-z0-9_.:-]`.
   * Keep an old key here until no row within retention uses it (24 h by default).
   */
  keys: Record<string, Uint8Array | string>;
  /** The key id new values are sealed with; must be in `keys`. */
  currentKeyId: string;
}

const VERSION = 1;
const IV_BYTES = 12; // the GCM standard IV size (SP 800-38D §8.2.2: random 96-bit IVs)
const TAG_BYTES = 16;
const KEY_ID = /^[A-Za-z0-9_.:-]{1,64}$/;
const encoder = new TextEncoder();

/**
 * The AAD binding a sealed value to its row and part.
 * @param part `body` or `headers`
 */
export function responseAad(scope: string, key: string, part: 'body' | 'headers'): Uint8Array {
  // Length-prefixed fields, so ("a", "bc") and ("ab", "c") never give the same bytes.
  const fields = [encoder.encode('idem.response.v1'), encoder.encode(part), encoder.encode(scope), encoder.encode(key)];
  const out = new Uint8Array(fields.reduce((n, f) => n + 4 + f.length, 0));
  const view = new DataView(out.buffer);
  let at = 0;
  for (const f of fields) {
    view.setUint32(at, f.length);
    out.set(f, at + 4);
    at += 4 + f.length;
  }
  return out;
}

/**
 * An AES-256-GCM {@link ResponseCipher} over the configured keys.
 *
 * @example
 * ```ts
 * const cipher = aesGcmCipher({ keys: { k2026: process.env.IDEM_KEY_2026! }, currentKeyId: 'k2026' });
 * const store = new PostgresStore({ client, cipher });
 * ```
 * @throws {InvalidOptionError} a key that is not 32 bytes, a bad key id, or `currentKeyId` not in `keys`
 */
export function aesGcmCipher(options: EncryptionOptions): ResponseCipher {
  const keys = new Map<string, Buffer>();
  for (const [id, value] of Object.entries(options?.keys ?? {})) {
    if (!KEY_ID.test(id)) throw new InvalidOptionError(`idem: encryption key id ${JSON.stringify(id)} must be 1-64 characters of [A-Za-z0-9_.:-]`);
    const key = typeof value === 'string' ? Buffer.from(value, 'base64') : Buffer.from(value);
    if (key.length !== 32) throw new InvalidOptionError(`idem: encryption key ${JSON.stringify(id)} must be 32 bytes (AES-256), got ${key.length}`);
    keys.set(id, key);
  }
  const currentKeyId = options?.currentKeyId;
  if (!keys.has(currentKeyId)) throw new InvalidOptionError(`idem: currentKeyId ${JSON.stringify(currentKeyId)} is not in \`keys\``);
  const header = (id: string) => Buffer.concat([Buffer.from([VERSION, id.length]), Buffer.from(id, 'ascii')]);

  return {
    currentKeyId,
    seal(plain, aad) {
      const head = header(currentKeyId);
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', keys.get(currentKeyId)!, iv);
      cipher.setAAD(Buffer.concat([head, aad]));
      const ciphertext = Buffer.concat([cipher.update(plain), cipher.final()]);
      return Buffer.concat([head, iv, cipher.getAuthTag(), ciphertext]);
    },
    open(sealed, aad) {
      const value = Buffer.from(sealed.buffer, sealed.byteOffset, sealed.byteLength);
      const idLength = value[1] ?? 0;
      const start = 2 + idLength;
      if (value[0] !== VERSION || idLength === 0 || value.length < start + IV_BYTES + TAG_BYTES) {
        throw new ResponseUnreadableError('The stored response is not a sealed value idem can read (bad version or length)');
      }
      const id = value.subarray(2, start).toString('ascii');
      const key = keys.get(id);
      if (!key) throw new UnknownKeyIdError(id);
      const decipher = createDecipheriv('aes-256-gcm', key, value.subarray(start, start + IV_BYTES));
      decipher.setAAD(Buffer.concat([value.subarray(0, start), aad]));
      decipher.setAuthTag(value.subarray(start + IV_BYTES, start + IV_BYTES + TAG_BYTES));
      try {
        const plain = Buffer.concat([decipher.update(value.subarray(start + IV_BYTES + TAG_BYTES)), decipher.final()]);
        return new Uint8Array(plain.buffer, plain.byteOffset, plain.byteLength);
      } catch (error) {
        throw new ResponseUnreadableError('The stored response failed authentication: tampered, or sealed for another row', { cause: error });
      }
    },
  };
}
