/**
 * The one decoder of a key's record and of its request snapshot, shared by the stores that
 * talk to a server (PostgreSQL rows, Redis hashes). Each store says how it reads each field
 * from what its server returned ({@link RecordColumns}); the record's shape, what a finished
 * key carries and how a snapshot is written and read back are decided here once.
 */
import { KeyState } from '../core/constants.js';
import type { KeyRecord, PhaseResults, RequestSnapshot, StoredResponse } from './types.js';

/**
 * How a store reads each field of a {@link KeyRecord} from `R` (a row as its driver returns
 * it, a hash's fields with the server's clock, …). Each reader converts its own encoding
 * (bytea or hex, a timestamp or epoch ms); none is called for a field the record leaves out.
 */
export interface RecordColumns<R> {
  /** The stored state, compared with `KeyState.Done` (anything else reads as started). */
  state(source: R): unknown;
  fingerprint(source: R): Uint8Array;
  recoveryPoint(source: R): string;
  phaseResults(source: R): PhaseResults;
  token(source: R): number;
  claimId(source: R): string;
  leaseExpired(source: R, state: KeyState): boolean;
  leaseRemainingMs(source: R): number;
  createdAt(source: R): Date;
  /** Retention left in ms by the store's clock (protocol.md K20), or undefined when not read. */
  retentionRemainingMs(source: R): number | undefined;
  /** The stored response of a finished key, or undefined when it was not read. Called only for `done`. */
  response(source: R): StoredResponse | undefined;
  /** The operator's note (protocol.md K40), or undefined when none or not read. */
  operatorNote?(source: R): string | undefined;
}

/** `source` as a {@link KeyRecord} of (`scope`, `key`), read through `columns`. */
export function decodeRecord<R>(columns: RecordColumns<R>, source: R, scope: string, key: string): KeyRecord {
  const state = columns.state(source) === KeyState.Done ? KeyState.Done : KeyState.Started;
  const record: KeyRecord = {
    scope,
    key,
    state,
    fingerprint: columns.fingerprint(source),
    recoveryPoint: columns.recoveryPoint(source),
    phaseResults: columns.phaseResults(source),
    token: columns.token(source),
    claimId: columns.claimId(source),
    leaseExpired: columns.leaseExpired(source, state),
    leaseRemainingMs: columns.leaseRemainingMs(source),
    createdAt: columns.createdAt(source),
  };
  const retentionRemainingMs = columns.retentionRemainingMs(source);
  if (retentionRemainingMs !== undefined) record.retentionRemainingMs = retentionRemainingMs;
  const operatorNote = columns.operatorNote?.(source);
  if (operatorNote) record.operatorNote = operatorNote;
  if (state === KeyState.Done) {
    const response = columns.response(source);
    if (response) record.response = response;
  }
  return record;
}

/** A request snapshot as the JSON text the stores keep (body in base64). */
export function encodeSnapshot(request: RequestSnapshot): string {
  return JSON.stringify({
    method: request.method,
    url: request.url,
    contentType: request.contentType,
    body: request.body ? Buffer.from(request.body.buffer, request.body.byteOffset, request.body.byteLength).toString('base64') : null,
  });
}

/**
 * A stored request snapshot, that JSON text parsed (a jsonb column as the driver returns it),
 * or undefined when none was stored.
 */
export function decodeSnapshot(value: unknown): RequestSnapshot | undefined {
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

/** A SQL boolean (0/1, as a number, a bigint or its text). */
export const sqlTrue = (value: unknown): boolean => value !== null && value !== undefined && Number(value) === 1;

/**
 * `phase_results` as the MySQL and SQLite stores keep it: a JSON object of each phase's result as
 * its own JSON text (`{}` for none; NULL reads as none).
 */
export function decodePhaseResults(value: unknown, text: (value: unknown) => string = String): PhaseResults {
  if (value === null || value === undefined) return {};
  const stored = JSON.parse(text(value)) as Record<string, string>;
  const results: PhaseResults = {};
  for (const [name, json] of Object.entries(stored)) results[name] = JSON.parse(json);
  return results;
}

/** How a SQL store reads its driver's values for {@link sqlRowColumns}. */
export interface SqlRowReaders {
  /** A binary column's bytes. */
  bytes(value: unknown): Uint8Array;
  /** A text column's string. */
  text(value: unknown): string;
  /** The row's `created_at` in epoch ms, as its statements return it. */
  createdMs(row: Record<string, unknown>): number;
}

/**
 * The {@link RecordColumns} of a key row as the MySQL and SQLite statements name its columns
 * (snake_case; booleans 0/1; lease and retention left as numbers computed by the database's clock).
 */
export function sqlRowColumns(read: SqlRowReaders): RecordColumns<Record<string, unknown>> {
  const missing = (value: unknown) => value === null || value === undefined;
  return {
    state: (row) => row.state,
    fingerprint: (row) => read.bytes(row.fingerprint),
    recoveryPoint: (row) => String(row.recovery_point),
    phaseResults: (row) => decodePhaseResults(row.phase_results, read.text),
    token: (row) => Number(row.lock_version),
    claimId: (row) => String(row.claim_id),
    leaseExpired: (row) => sqlTrue(row.lease_expired),
    leaseRemainingMs: (row) => (missing(row.lease_remaining_ms) ? 0 : Number(row.lease_remaining_ms)),
    operatorNote: (row) => (missing(row.operator_note) ? undefined : read.text(row.operator_note)),
    createdAt: (row) => new Date(read.createdMs(row)),
    retentionRemainingMs: (row) => (missing(row.retention_remaining_ms) ? undefined : Number(row.retention_remaining_ms)),
    response: (row) => ({
      status: Number(row.response_status),
      headers: missing(row.response_headers) ? [] : (JSON.parse(read.text(row.response_headers)) as Array<[string, string]>),
      body: read.bytes(row.response_body),
    }),
  };
}
