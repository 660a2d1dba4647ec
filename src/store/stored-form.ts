/**
 * How a response is written to a SQL store's row (PostgreSQL, MySQL): sealed when encryption is
 * on, its body inline or out of line (protocol.md K14), and how sealed headers are read back.
 * Store-neutral: the stores differ only in where they put the pieces.
 */
import { randomUUID } from 'node:crypto';
import { type ResponseCipher, responseAad } from '../core/cipher.js';
import type { KeyRef, StoredResponse } from './types.js';

/**
 * Bodies above 64 KiB go out of line by default. Below it, one statement claims or replays
 * (the body comes back with the row). Above it, the conflict path (409, 422, the claim's own
 * read) would otherwise carry the whole body on every retry of a key still in progress or
 * reused, and the keys table's TOAST would grow with the largest responses; one extra round
 * trip on replay of a large body costs little next to sending it. Most JSON API responses are
 * a few KiB, so they stay inline.
 */
export const DEFAULT_INLINE_MAX_BYTES = 64 * 1024;

/** Names one out-of-line body: the row it belongs to and the blob id the row points at. */
export interface BlobRef {
  scope: string;
  key: string;
  /** Chosen by the store when it writes the body (a random UUID); kept in `response_body_ref`. */
  id: string;
}

/** What {@link storedForm} needs of a store's settings. */
export interface StoredFormSettings {
  /** Bodies longer than this (plaintext bytes) go out of line. */
  readonly inlineMaxBytes: number;
  /** Encryption at rest, or undefined for plaintext. */
  readonly cipher: ResponseCipher | undefined;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A response as written to the row: sealed when encryption is on, body inline or out of line. */
export interface StoredForm {
  /** The `response_headers` value, JSON text. */
  headers: string;
  /** The inline body, or null when it goes out of line. */
  body: Uint8Array | null;
  /** The out-of-line body and where it goes. */
  blob: { ref: BlobRef; body: Uint8Array } | undefined;
  /** The key id it was sealed with, or null for plaintext. */
  keyId: string | null;
}

/** Seals the response when encryption is on and decides inline or out of line (by the plaintext length). */
export function storedForm(settings: StoredFormSettings, ref: Pick<KeyRef, 'scope' | 'key'>, response: StoredResponse): StoredForm {
  const outOfLine = response.body.length > settings.inlineMaxBytes;
  const headersJson = JSON.stringify(response.headers);
  let headers = headersJson;
  let body = response.body;
  if (settings.cipher) {
    const sealed = settings.cipher.seal(encoder.encode(headersJson), responseAad(ref.scope, ref.key, 'headers'));
    headers = JSON.stringify(Buffer.from(sealed).toString('base64'));
    body = settings.cipher.seal(response.body, responseAad(ref.scope, ref.key, 'body'));
  }
  return {
    headers,
    body: outOfLine ? null : body,
    blob: outOfLine ? { ref: { scope: ref.scope, key: ref.key, id: randomUUID() }, body } : undefined,
    keyId: settings.cipher ? settings.cipher.currentKeyId : null,
  };
}

/**
 * The replayed headers of a sealed response: base64 of the sealed JSON pairs, bound to
 * (scope, key) by the AAD.
 * @throws {ResponseUnreadableError} wrong key, tampered, or sealed for another row
 */
export function openHeaders(cipher: ResponseCipher, sealed: string, scope: string, key: string): Array<[string, string]> {
  const plain = cipher.open(Buffer.from(sealed, 'base64'), responseAad(scope, key, 'headers'));
  return JSON.parse(decoder.decode(plain)) as Array<[string, string]>;
}
