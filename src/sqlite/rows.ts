/**
 * SQLite rows as idem's records, through the decoder every store shares (src/store/records.ts),
 * and a finished key's response read back exactly as written (its seal opened).
 */
import { type ResponseCipher, responseAad } from '../core/cipher.js';
import { KeyState } from '../core/constants.js';
import { ResponseUnreadableError, UnknownKeyIdError } from '../core/errors.js';
import { decodeRecord, type RecordColumns } from '../store/records.js';
import { openHeaders } from '../store/stored-form.js';
import type { KeyRecord, PhaseResults } from '../store/types.js';
import type { SqliteRow } from './client.js';

/** A BLOB as each driver returns it (Uint8Array, Buffer, or libSQL's ArrayBuffer). */
export function bytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (value === null || value === undefined) return new Uint8Array(0);
  if (typeof value === 'string') return new Uint8Array(Buffer.from(value, 'utf8'));
  throw new TypeError('idem/sqlite: expected a BLOB column as bytes');
}

/** A SQL boolean (0/1, as a number or a bigint). */
export const truthy = (value: unknown): boolean => value !== null && value !== undefined && Number(value) === 1;

/** A number column, or 0 for NULL. */
const num = (value: unknown): number => (value === null || value === undefined ? 0 : Number(value));

/** `phase_results` as stored: each phase's result kept as its JSON text (sql.ts `recordPhase`). */
export function phaseResults(value: unknown): PhaseResults {
  if (value === null || value === undefined) return {};
  const stored = JSON.parse(String(value)) as Record<string, string>;
  const results: PhaseResults = {};
  for (const [name, json] of Object.entries(stored)) results[name] = JSON.parse(json);
  return results;
}

const COLUMNS: RecordColumns<SqliteRow> = {
  state: (row) => row.state,
  fingerprint: (row) => bytes(row.fingerprint),
  recoveryPoint: (row) => String(row.recovery_point),
  phaseResults: (row) => phaseResults(row.phase_results),
  token: (row) => Number(row.lock_version),
  claimId: (row) => String(row.claim_id),
  leaseExpired: (row) => truthy(row.lease_expired),
  leaseRemainingMs: (row) => num(row.lease_remaining_ms),
  operatorNote: (row) => (row.operator_note === null || row.operator_note === undefined ? undefined : String(row.operator_note)),
  createdAt: (row) => new Date(Number(row.created_at)),
  retentionRemainingMs: (row) =>
    row.retention_remaining_ms === null || row.retention_remaining_ms === undefined ? undefined : Number(row.retention_remaining_ms),
  response: (row) => ({
    status: Number(row.response_status),
    headers: row.response_headers === null ? [] : (JSON.parse(String(row.response_headers)) as Array<[string, string]>),
    body: bytes(row.response_body),
  }),
};

/** Whether the row is past retention (by the database's clock, as read). */
export const retentionExpired = (row: SqliteRow): boolean => truthy(row.retention_expired);
/** Whether the row's lease is not valid. */
export const leaseExpired = (row: SqliteRow): boolean => truthy(row.lease_expired);

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
