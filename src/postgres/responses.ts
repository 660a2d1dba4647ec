/**
 * How a response is written to a row and read back: sealed when encryption is on, body inline
 * or out of line in the blob store.
 */
import { randomUUID } from 'node:crypto';
import { type ResponseCipher, responseAad } from '../core/cipher.js';
import { ResponseUnreadableError, UnknownKeyIdError } from '../core/errors.js';
import { sameFingerprint } from '../core/fingerprint.js';
import type { KeyRecord, KeyRef, StoredResponse } from '../store/types.js';
import type { BlobRef } from './blob-store.js';
import type { StoreContext } from './options.js';
import { doneRecord, type Row, toRecord } from './rows.js';
import { bytes } from './values.js';

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
export function storedForm(ctx: Pick<StoreContext, 'inlineMaxBytes' | 'cipher'>, ref: Pick<KeyRef, 'scope' | 'key'>, response: StoredResponse): StoredForm {
  const outOfLine = response.body.length > ctx.inlineMaxBytes;
  const headersJson = JSON.stringify(response.headers);
  let headers = headersJson;
  let body = response.body;
  if (ctx.cipher) {
    const sealed = ctx.cipher.seal(encoder.encode(headersJson), responseAad(ref.scope, ref.key, 'headers'));
    headers = JSON.stringify(Buffer.from(sealed).toString('base64'));
    body = ctx.cipher.seal(response.body, responseAad(ref.scope, ref.key, 'body'));
  }
  return {
    headers,
    body: outOfLine ? null : body,
    blob: outOfLine ? { ref: { scope: ref.scope, key: ref.key, id: randomUUID() }, body } : undefined,
    keyId: ctx.cipher ? ctx.cipher.currentKeyId : null,
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

/**
 * A row as a record; a finished row's response is read back exactly as it was written (its
 * blob fetched, its seal opened). With `requestFingerprint`, a response that will not be
 * replayed (another request under the key: a mismatch) is left out, neither fetched nor opened.
 * @throws {UnknownKeyIdError} sealed with a key id that is not configured
 * @throws {ResponseUnreadableError} tampered, sealed for another row, or its blob is missing
 */
export function readRecord(ctx: StoreContext, row: Row, scope: string, key: string, requestFingerprint?: Uint8Array): Promise<KeyRecord> {
  return openResponse(ctx, toRecord(row, scope, key), row.response_body_ref, row.response_key_id, requestFingerprint);
}

/** {@link readRecord} of a `readDone` row (sql/claim.ts): a finished key within retention. */
export function readDoneRecord(ctx: StoreContext, row: Row, scope: string, key: string, requestFingerprint: Uint8Array): Promise<KeyRecord> {
  const done = doneRecord(row, scope, key);
  return openResponse(ctx, done.record, done.bodyRef, done.keyId, requestFingerprint);
}

/**
 * The record with its response as written: the out-of-line body (`bodyRef`) fetched, the seal
 * (`keyId`) opened; left out on a fingerprint mismatch (see {@link readRecord}).
 */
async function openResponse(ctx: StoreContext, record: KeyRecord, bodyRef: unknown, keyIdValue: unknown, requestFingerprint?: Uint8Array): Promise<KeyRecord> {
  if (!record.response) return record;
  if (requestFingerprint && !sameFingerprint(record.fingerprint, requestFingerprint)) {
    delete record.response;
    return record;
  }
  const { scope, key } = record;
  const keyId = keyIdValue === null || keyIdValue === undefined ? undefined : String(keyIdValue);
  let body: Uint8Array | undefined = record.response.body;
  if (bodyRef) {
    body = await ctx.blobs.get({ scope, key, id: String(bodyRef) });
    if (body === undefined) throw new ResponseUnreadableError(`The out-of-line body of this stored response is missing (blob ${String(bodyRef)})`);
    body = bytes(body);
  }
  if (keyId === undefined) {
    record.response.body = body;
    return record;
  }
  if (!ctx.cipher) throw new UnknownKeyIdError(keyId);
  // A sealed response's headers are stored as the JSON string of their base64 (`storedForm`).
  const sealedHeaders: unknown = record.response.headers;
  if (typeof sealedHeaders !== 'string') throw new ResponseUnreadableError('The stored response is marked encrypted but its headers are not sealed');
  record.response.headers = openHeaders(ctx.cipher, sealedHeaders, scope, key);
  record.response.body = ctx.cipher.open(body, responseAad(scope, key, 'body'));
  record.sealed = true;
  return record;
}
