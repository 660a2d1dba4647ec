/**
 * How a row's response is read back: its out-of-line body fetched from the blob store, its seal
 * opened. How it is written is store-neutral (src/store/stored-form.ts).
 */
import { responseAad } from '../core/cipher.js';
import { ResponseUnreadableError, UnknownKeyIdError } from '../core/errors.js';
import { sameFingerprint } from '../core/fingerprint.js';
import { openHeaders } from '../store/stored-form.js';
import type { KeyRecord } from '../store/types.js';
import type { StoreContext } from './context.js';
import { doneRecord, type Row, toRecord } from './rows.js';
import { bytes } from './values.js';

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
