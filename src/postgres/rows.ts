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
  // A `readDone` row (a finished key's lean read, sql/claim.ts) has no `recovery_point`: `finished`.
  recoveryPoint: (row) => (row.recovery_point === undefined ? RECOVERY_POINT_FINISHED : String(row.recovery_point)),
  phaseResults: (row) =>
    (row.phase_results_json === undefined
      ? (row.phase_results ?? {})
      : row.phase_results_json === null
        ? {}
        : JSON.parse(String(row.phase_results_json))) as PhaseResults,
  token: (row) => Number(row.lock_version),
  claimId: (row) => String(row.claim_id),
  // A row from `readDone` has no lease columns: a finished row holds no lease (expired, 0 ms left).
  leaseExpired: (row, state) => (row.lease_expired === undefined ? state === KeyState.Done : row.lease_expired === true),
  leaseRemainingMs: (row) => Number(row.lease_remaining_ms ?? 0),
  createdAt: (row) => (row.created_ms === undefined ? timestamp(row.created_at) : new Date(Math.round(Number(row.created_ms)))),
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
 * A row as a {@link KeyRecord}. `scope` and `key` are the ones the row was looked up by. A row
 * from `readDone` has no lease columns: a finished row holds no lease (expired, 0 ms left).
 * The response is as stored (sealed, or empty when out of line); `readRecord` in responses.ts
 * opens it. The row object is only read, never extended: adding properties to the driver's
 * row objects measurably slowed the replay path (bench/).
 */
export function toRecord(row: Row, scope: string, key: string): KeyRecord {
  return decodeRecord(ROW_COLUMNS, row, scope, key);
}
