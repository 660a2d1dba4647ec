/**
 * SQLite rows as idem's records, through the decoder every store shares (src/store/records.ts),
 * and a finished key's response read back exactly as written (its seal opened).
 */
import { type ResponseCipher, responseAad } from '../core/cipher.js';
import { KeyState } from '../core/constants.js';
import { ResponseUnreadableError, UnknownKeyIdError } from '../core/errors.js';
import { decodePhaseResults, decodeRecord, sqlRowColumns, sqlTrue } from '../store/records.js';
import { openHeaders } from '../store/stored-form.js';
import type { KeyRecord, PhaseResults } from '../store/types.js';
import type { SqliteRow } from './client.js';

/** A BLOB as each driver returns it (Uint8Array, Buffer, libSQL's ArrayBuffer, or D1's array of byte values). */
export function bytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (Array.isArray(value)) return Uint8Array.from(value as number[]);
  if (value === null || value === undefined) return new Uint8Array(0);
  if (typeof value === 'string') return new Uint8Array(Buffer.from(value, 'utf8'));
  throw new TypeError('idem/sqlite: expected a BLOB column as bytes');
}

/** `phase_results` as stored: each phase's result kept as its JSON text (sql.ts `recordPhase`). */
export const phaseResults = (value: unknown): PhaseResults => decodePhaseResults(value);

const COLUMNS = sqlRowColumns({ bytes, text: String, createdMs: (row) => Number(row.created_at) });

/** Whether the row is past retention (by the database's clock, as read). */
export const retentionExpired = (row: SqliteRow): boolean => sqlTrue(row.retention_expired);
/** Whether the row's lease is not valid. */
export const leaseExpired = (row: SqliteRow): boolean => sqlTrue(row.lease_expired);

/**
 * A row as a record; a finished key's response as it was written (its seal opened).
 * @throws {UnknownKeyIdError} sealed with a key id that is not configured
 * @throws {ResponseUnreadableError} tampered, or sealed for another row
 */
export function readRecord(cipher: ResponseCipher | undefined, row: SqliteRow, scope: string, key: string): KeyRecord {
  const record = decodeRecord(COLUMNS, row, scope, key);
  if (!record.response || record.state !== KeyState.Done) return record;
  const keyId = row.response_key_id === null || row.response_key_id === undefined ? undefined : String(row.response_key_id);
  if (keyId === undefined) return record;
  if (!cipher) throw new UnknownKeyIdError(keyId);
  const sealedHeaders = row.response_headers === null ? undefined : JSON.parse(String(row.response_headers));
  if (typeof sealedHeaders !== 'string') throw new ResponseUnreadableError('The stored response is marked encrypted but its headers are not sealed');
  record.response.headers = openHeaders(cipher, sealedHeaders, scope, key);
  record.response.body = cipher.open(record.response.body, responseAad(scope, key, 'body'));
  record.sealed = true;
  return record;
}
