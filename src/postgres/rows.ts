/**
 * Decoding the driver's rows into the store's types, through the decoder every store shares
 * (src/store/records.ts). Pure: no queries, no keys.
 */
import { KeyState, RECOVERY_POINT_FINISHED } from '../core/constants.js';
import { decodeRecord, type RecordColumns } from '../store/records.js';
import type { KeyRecord, PhaseResults } from '../store/types.js';
import type { BlobRef } from './blob-store.js';
import { bytes, timestamp } from './values.js';

/** A row as the driver returns it. */
export type Row = Record<string, unknown>;

/** The out-of-line body the row points at (`response_body_ref`). */
export function blobRef(row: Row, scope: string, key: string): BlobRef {
  return { scope, key, id: String(row.response_body_ref) };
}

/** How a row's columns read as a record's fields (the one decoder: src/store/records.ts). */
const ROW_COLUMNS: RecordColumns<Row> = {
  state: (row) => row.state,
  fingerprint: (row) => bytes(row.fingerprint),
  recoveryPoint: (row) => (row.recovery_point === undefined ? RECOVERY_POINT_FINISHED : String(row.recovery_point)),
  phaseResults: (row) => (row.phase_results ?? {}) as PhaseResults,
  token: (row) => Number(row.lock_version),
  claimId: (row) => String(row.claim_id),
  leaseExpired: (row, state) => (row.lease_expired === undefined ? state === KeyState.Done : row.lease_expired === true),
  leaseRemainingMs: (row) => Number(row.lease_remaining_ms ?? 0),
  createdAt: (row) => timestamp(row.created_at),
  // By the database clock (sql/claim.ts), for the replay cache (protocol.md K20).
  retentionRemainingMs: (row) =>
    row.retention_remaining_ms !== undefined && row.retention_remaining_ms !== null ? Number(row.retention_remaining_ms) : undefined,
  response: (row) => ({
    status: Number(row.response_status),
    headers: (row.response_headers ?? []) as Array<[string, string]>,
    body: bytes(row.response_body),
  }),
  // Only `read` (the store's `get`) selects it (protocol.md K40).
  operatorNote: (row) => (typeof row.operator_note === 'string' ? row.operator_note : undefined),
};

/**
 * A row as a {@link KeyRecord}. `scope` and `key` are the ones the row was looked up by.
 * The response is as stored (sealed, or empty when out of line); `readRecord` in responses.ts
 * opens it. The row object is only read, never extended: adding properties to the driver's
 * row objects measurably slowed the replay path (bench/).
 */
export function toRecord(row: Row, scope: string, key: string): KeyRecord {
  return decodeRecord(ROW_COLUMNS, row, scope, key);
}

/** What a `readDone` row (sql/claim.ts) carries besides the record: where its response is kept. */
export interface DoneRow {
  record: KeyRecord;
  /** The out-of-line body's ref (`response_body_ref`), or null when the body is inline. */
  bodyRef: unknown;
  /** The key id the response was sealed with (`response_key_id`), or null for plaintext. */
  keyId: unknown;
}

/** A `readDone` row and its one json column, parsed: [token, claim id, created_at, retention ms left, body ref, key id, phase results]. */
interface DoneSource {
  row: Row;
  packed: [string, string, string, number, unknown, unknown, PhaseResults | null];
}

/** How a `readDone` row reads as a record, through the same decoder: a finished row holds no lease and its recovery point is `finished`. */
const DONE_COLUMNS: RecordColumns<DoneSource> = {
  state: () => KeyState.Done,
  fingerprint: (s) => ROW_COLUMNS.fingerprint(s.row),
  recoveryPoint: () => RECOVERY_POINT_FINISHED,
  phaseResults: (s) => s.packed[6] ?? {},
  token: (s) => Number(s.packed[0]),
  claimId: (s) => String(s.packed[1]),
  leaseExpired: () => true,
  leaseRemainingMs: () => 0,
  // json's ISO text of the timestamptz, with its offset; read to the ms, as a timestamptz column is.
  createdAt: (s) => timestamp(s.packed[2]),
  retentionRemainingMs: (s) => Number(s.packed[3]),
  response: (s) => ROW_COLUMNS.response(s.row),
};

/**
 * A `readDone` row (a finished key within retention, sql/claim.ts) as a record: the replay's
 * five columns as they are, the rest from its one json column. The same record `toRecord`
 * makes of the whole row (test/claim-path.test.ts compares them).
 */
export function doneRecord(row: Row, scope: string, key: string): DoneRow {
  const packed = (typeof row.record === 'string' ? JSON.parse(row.record) : row.record) as DoneSource['packed'];
  return { record: decodeRecord(DONE_COLUMNS, { row, packed }, scope, key), bodyRef: packed[4], keyId: packed[5] };
}
