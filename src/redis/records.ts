/**
 * Redis replies as the store's types: a hash's fields as a {@link KeyRecord}, the request
 * snapshot, phase results (one `p:<phase>` field each).
 */
import { KeyState } from '../core/constants.js';
import type { KeyRecord, PhaseResults, RequestSnapshot, StoredResponse } from '../store/types.js';

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

/** A flat field reply as a {@link KeyRecord}, judged at `nowMs` (the server clock). */
export function toRecord(scope: string, key: string, nowMs: number, reply: unknown[]): KeyRecord {
  return recordOf(scope, key, nowMs, toFields(reply));
}

/** A hash's fields as a {@link KeyRecord}; the response only when its body was read. */
export function recordOf(scope: string, key: string, nowMs: number, f: Record<string, string>): KeyRecord {
  const state = f.st === KeyState.Done ? KeyState.Done : KeyState.Started;
  const leaseEndMs = Number(f.lu ?? 0);
  const record: KeyRecord = {
    scope,
    key,
    state,
    fingerprint: new Uint8Array(Buffer.from(f.fp ?? '', 'hex')),
    recoveryPoint: f.rp ?? 'start',
    phaseResults: phases(f),
    token: Number(f.tok),
    claimId: f.cid ?? '',
    leaseExpired: leaseEndMs <= nowMs,
    leaseRemainingMs: Math.max(0, leaseEndMs - nowMs),
    createdAt: new Date(Number(f.ca)),
  };
  if (state === KeyState.Done && f.rb !== undefined) {
    const response: StoredResponse = {
      status: Number(f.rs),
      headers: JSON.parse(f.rh ?? '[]') as Array<[string, string]>,
      body: new Uint8Array(Buffer.from(f.rb, 'base64')),
    };
    record.response = response;
  }
  return record;
}

/** The stored request snapshot (JSON, body in base64), or undefined when none was stored. */
export function toSnapshot(value: string | undefined): RequestSnapshot | undefined {
  if (!value) return undefined;
  const v = JSON.parse(value) as { method?: unknown; url?: unknown; contentType?: unknown; body?: unknown };
  if (typeof v.method !== 'string' || typeof v.url !== 'string') return undefined;
  return {
    method: v.method,
    url: v.url,
    contentType: typeof v.contentType === 'string' ? v.contentType : null,
    body: typeof v.body === 'string' ? new Uint8Array(Buffer.from(v.body, 'base64')) : null,
  };
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
