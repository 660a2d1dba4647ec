/**
 * Decoding the driver's rows into the store's types (and the one value the store encodes into
 * a row: the request snapshot). Pure: no queries, no keys.
 */
import { KeyState } from '../core/constants.js';
import type { KeyRecord, PhaseResults, RequestSnapshot, StoredResponse } from '../store/types.js';
import type { BlobRef } from './blob-store.js';

/** A row as the driver returns it. */
export type Row = Record<string, unknown>;

/**
 * A bytea column as a Uint8Array (a Buffer from pg is viewed, not copied); NULL as empty.
 * @throws {TypeError} for anything else
 */
export function bytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (value === null || value === undefined) return new Uint8Array(0);
  throw new TypeError('idem/postgres: expected bytea as Uint8Array');
}

/** A timestamptz column as a Date, or null for NULL. */
export function dateOrNull(value: unknown): Date | null {
  return value === null || value === undefined ? null : value instanceof Date ? value : new Date(String(value));
}

/** The out-of-line body the row points at (`response_body_ref`). */
export function blobRef(row: Row, scope: string, key: string): BlobRef {
  return { scope, key, id: String(row.response_body_ref) };
}

/**
 * A row as a {@link KeyRecord}. `scope` and `key` are the ones the row was looked up by. A row
 * from `readDone` has no lease columns: a finished row holds no lease (expired, 0 ms left).
 * The response is as stored (sealed, or empty when out of line); `readRecord` in responses.ts
 * opens it. The row object is only read, never extended: adding properties to the driver's
 * row objects measurably slowed the replay path (bench/).
 */
export function toRecord(row: Row, scope: string, key: string): KeyRecord {
  const state = row.state === KeyState.Done ? KeyState.Done : KeyState.Started;
  const record: KeyRecord = {
    scope,
    key,
    state,
    fingerprint: bytes(row.fingerprint),
    recoveryPoint: String(row.recovery_point),
    phaseResults: (row.phase_results ?? {}) as PhaseResults,
    token: Number(row.lock_version),
    claimId: String(row.claim_id),
    leaseExpired: row.lease_expired === undefined ? state === KeyState.Done : row.lease_expired === true,
    leaseRemainingMs: Number(row.lease_remaining_ms ?? 0),
    createdAt: row.created_at instanceof Date ? row.created_at : new Date(String(row.created_at)),
  };
  // By the database clock (sql/claim.ts), for the replay cache (protocol.md K20).
  if (row.retention_remaining_ms !== undefined && row.retention_remaining_ms !== null) record.retentionRemainingMs = Number(row.retention_remaining_ms);
  if (state === KeyState.Done) {
    const response: StoredResponse = {
      status: Number(row.response_status),
      headers: (row.response_headers ?? []) as Array<[string, string]>,
      body: bytes(row.response_body),
    };
    record.response = response;
  }
  return record;
}

/** A request snapshot as the JSON text stored in the `request` column (body in base64). */
export function snapshotJson(request: RequestSnapshot): string {
  return JSON.stringify({
    method: request.method,
    url: request.url,
    contentType: request.contentType,
    body: request.body ? Buffer.from(request.body.buffer, request.body.byteOffset, request.body.byteLength).toString('base64') : null,
  });
}

/** The stored request snapshot (jsonb, body in base64), or undefined when none was stored. */
export function toSnapshot(value: unknown): RequestSnapshot | undefined {
  if (!value || typeof value !== 'object') return undefined;
  const v = value as { method?: unknown; url?: unknown; contentType?: unknown; body?: unknown };
  if (typeof v.method !== 'string' || typeof v.url !== 'string') return undefined;
  return {
    method: v.method,
    url: v.url,
    contentType: typeof v.contentType === 'string' ? v.contentType : null,
    body: typeof v.body === 'string' ? new Uint8Array(Buffer.from(v.body, 'base64')) : null,
  };
}
