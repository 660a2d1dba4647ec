/** One key as the memory store holds it (store.ts), and the copies it hands out. */
import type { KeyState } from '../core/constants.js';
import type { PhaseResults, RequestSnapshot, StoredResponse } from '../store/types.js';

/**
 * One key as the memory store holds it; `lockedUntil` is epoch ms (a release sets it to now: the
 * lease is over, and the completer's grace counts from then), `null` when finished.
 */
export interface Entry {
  scope: string;
  key: string;
  fingerprint: Uint8Array;
  state: KeyState;
  recoveryPoint: string;
  phaseResults: PhaseResults;
  token: number;
  claimId: string;
  lockedUntil: number | null;
  createdAt: number;
  finishedAt: number | null;
  response?: StoredResponse;
  request?: RequestSnapshot;
  /** Attempts counted as failed: takeovers of a lease that ran out unreleased (protocol.md K23). */
  failedAttempts?: number;
  /** True from a release to the next takeover: that takeover is not a crash (protocol.md K23). */
  released?: boolean;
  /** The last operator action's note (protocol.md K40). */
  operatorNote?: string;
}

export const defaultClock = (): number => performance.timeOrigin + performance.now();
export const copyBytes = (bytes: Uint8Array): Uint8Array => new Uint8Array(bytes);
export const copyResponse = (r: StoredResponse): StoredResponse => ({
  status: r.status,
  headers: r.headers.map(([name, value]) => [name, value] as [string, string]),
  body: copyBytes(r.body),
});
export const copyRequest = (r: RequestSnapshot): RequestSnapshot => ({ ...r, body: r.body ? copyBytes(r.body) : null });
/** Phase results are JSON, as a database store keeps them: a result is stored as its JSON form. */
export const asJson = (value: unknown): unknown => JSON.parse(JSON.stringify(value ?? null)) as unknown;

/** The map key of (scope, key). */
export function idOf(scope: string, key: string): string {
  return JSON.stringify([scope, key]);
}

export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, i) => byte === b[i]);
}
