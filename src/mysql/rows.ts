/**
 * MySQL rows as idem's records, through the decoder every store shares (src/store/records.ts),
 * and a finished key's response read back exactly as written (blob fetched, seal opened).
 */
import { type ResponseCipher, responseAad } from '../core/cipher.js';
import { KeyState } from '../core/constants.js';
import { ResponseUnreadableError, UnknownKeyIdError } from '../core/errors.js';
import { sameFingerprint } from '../core/fingerprint.js';
import { openHeaders } from '../store/stored-form.js';
import { decodePhaseResults, decodeRecord, sqlRowColumns, sqlTrue } from '../store/records.js';
import type { KeyRecord, PhaseResults } from '../store/types.js';
import type { MySqlRow } from './client.js';

/** Binary and text columns as mysql2 returns them (Buffer), or a string. */
export function bytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (value === null || value === undefined) return new Uint8Array(0);
  if (typeof value === 'string') return new Uint8Array(Buffer.from(value, 'utf8'));
  throw new TypeError('idem/mysql: expected a binary column as a Buffer');
}

/** A text column (a string, or a Buffer when the column is binary) as a string. */
export function text(value: unknown): string {
  return value instanceof Uint8Array ? Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('utf8') : String(value);
}

/**
 * `phase_results` as stored: each phase's result kept as its JSON text (sql.ts `recordPhase`).
 */
export const phaseResults = (value: unknown): PhaseResults => decodePhaseResults(value, text);

const COLUMNS = sqlRowColumns({ bytes, text, createdMs: (row) => Number(row.created_ms) });

/** Whether the row is past retention (by the server's clock, as read). */
export const retentionExpired = (row: MySqlRow): boolean => sqlTrue(row.retention_expired);
/** Whether the row's lease is not valid. */
export const leaseExpired = (row: MySqlRow): boolean => sqlTrue(row.lease_expired);

/** How a record's response is opened: its blob read and its key. */
export interface ResponseReader {
  blob(scope: string, key: string, id: string): Promise<Uint8Array | undefined>;
  cipher: ResponseCipher | undefined;
}

/**
 * A row as a record; a finished key's response as it was written (its blob fetched, its seal
 * opened). With `requestFingerprint`, a response that will not be replayed (a mismatch) is left
 * out, neither fetched nor opened.
 * @throws {UnknownKeyIdError} sealed with a key id that is not configured
 * @throws {ResponseUnreadableError} tampered, sealed for another row, or its blob is missing
 */
export async function readRecord(reader: ResponseReader, row: MySqlRow, scope: string, key: string, requestFingerprint?: Uint8Array): Promise<KeyRecord> {
  const record = decodeRecord(COLUMNS, row, scope, key);
  if (!record.response || record.state !== KeyState.Done) return record;
  if (requestFingerprint && !sameFingerprint(record.fingerprint, requestFingerprint)) {
    delete record.response;
    return record;
  }
  let body = record.response.body;
  if (row.response_body_ref !== null && row.response_body_ref !== undefined) {
    const blob = await reader.blob(scope, key, String(row.response_body_ref));
    if (blob === undefined)
      throw new ResponseUnreadableError(`The out-of-line body of this stored response is missing (blob ${String(row.response_body_ref)})`);
    body = bytes(blob);
  }
  const keyId = row.response_key_id === null || row.response_key_id === undefined ? undefined : String(row.response_key_id);
  if (keyId === undefined) {
    record.response.body = body;
    return record;
  }
  if (!reader.cipher) throw new UnknownKeyIdError(keyId);
  const sealedHeaders = row.response_headers === null || row.response_headers === undefined ? undefined : JSON.parse(text(row.response_headers));
  if (typeof sealedHeaders !== 'string') throw new ResponseUnreadableError('The stored response is marked encrypted but its headers are not sealed');
  record.response.headers = openHeaders(reader.cipher, sealedHeaders, scope, key);
  record.response.body = reader.cipher.open(body, responseAad(scope, key, 'body'));
  record.sealed = true;
  return record;
}
