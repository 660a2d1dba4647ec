/**
 * Redis replies as the store's types: a hash's fields as a {@link KeyRecord}, the request
 * snapshot, phase results (one `p:<phase>` field each).
 */
import { decodeRecord, decodeSnapshot, type RecordColumns } from '../store/records.js';
import type { KeyRecord, PhaseResults, RequestSnapshot } from '../store/types.js';

/** Bytes as lower-case hex. */
export function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');
}

/** A hash reply (a flat RESP2 `[field, value, ...]` array, or a RESP3 map) as an object. */
export function toFields(reply: unknown): Record<string, string> {
  const out: Record<string, string> = {};
  if (reply instanceof Map) {
    for (const [k, v] of reply) out[String(k)] = String(v);
    return out;
  }
  if (reply && typeof reply === 'object' && !Array.isArray(reply)) {
    for (const [k, v] of Object.entries(reply)) out[k] = String(v);
    return out;
  }
  const list = (reply ?? []) as unknown[];
  for (let i = 0; i + 1 < list.length; i += 2) out[String(list[i])] = String(list[i + 1]);
  return out;
}

/** The `p:<phase>` fields as phase results. */
export function phases(f: Record<string, string>): PhaseResults {
  const out: PhaseResults = {};
  for (const name of Object.keys(f)) if (name.startsWith('p:')) out[name.slice(2)] = JSON.parse(f[name]!);
  return out;
}

/** A hash's fields with the server clock they were read at, and the retention to judge them by. */
interface HashRead {
  f: Record<string, string>;
  nowMs: number;
  retentionMs: number | undefined;
}

/** How a hash's fields read as a record's fields (the one decoder: src/store/records.ts). */
const HASH_COLUMNS: RecordColumns<HashRead> = {
  state: ({ f }) => f.st,
  fingerprint: ({ f }) => new Uint8Array(Buffer.from(f.fp ?? '', 'hex')),
  recoveryPoint: ({ f }) => f.rp ?? 'start',
  phaseResults: ({ f }) => phases(f),
  token: ({ f }) => Number(f.tok),
  claimId: ({ f }) => f.cid ?? '',
  leaseExpired: ({ f, nowMs }) => Number(f.lu ?? 0) <= nowMs,
  leaseRemainingMs: ({ f, nowMs }) => Math.max(0, Number(f.lu ?? 0) - nowMs),
  createdAt: ({ f }) => new Date(Number(f.ca)),
  retentionRemainingMs: ({ f, nowMs, retentionMs }) => (retentionMs === undefined ? undefined : retentionLeft(f, retentionMs, nowMs)),
  // Only when the body was read (`rb`).
  response: ({ f }) =>
    f.rb === undefined
      ? undefined
      : { status: Number(f.rs), headers: JSON.parse(f.rh ?? '[]') as Array<[string, string]>, body: new Uint8Array(Buffer.from(f.rb, 'base64')) },
  operatorNote: ({ f }) => f.op,
};

/**
 * A flat field reply as a {@link KeyRecord}, judged at `nowMs` (the server clock); with
 * `retentionMs`, the retention left too (protocol.md K20).
 */
export function toRecord(scope: string, key: string, nowMs: number, reply: unknown[], retentionMs?: number): KeyRecord {
  return decodeRecord(HASH_COLUMNS, { f: toFields(reply), nowMs, retentionMs }, scope, key);
}

/** A hash's fields as a {@link KeyRecord}; the response only when its body was read. */
export function recordOf(scope: string, key: string, nowMs: number, f: Record<string, string>): KeyRecord {
  return decodeRecord(HASH_COLUMNS, { f, nowMs, retentionMs: undefined }, scope, key);
}

/** The stored request snapshot (JSON, body in base64), or undefined when none was stored. */
export function toSnapshot(value: string | undefined): RequestSnapshot | undefined {
  return value ? decodeSnapshot(JSON.parse(value)) : undefined;
}

/**
 * The retention left of a hash, by the server clock at `nowMs` (protocol.md K20): until the
 * earlier of its own expiry (`ca` + `rt`, when the hash goes) and the read's retention.
 */
export function retentionLeft(f: Record<string, string>, retentionMs: number, nowMs: number): number {
  const createdAt = Number(f.ca);
  const own = f.rt === undefined ? retentionMs : Math.min(retentionMs, Number(f.rt));
  return createdAt + own - nowMs;
}
