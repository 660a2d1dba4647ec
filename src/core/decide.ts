import { KeyState } from './constants.js';
import { sameFingerprint } from './fingerprint.js';

/** The parts of an existing key row that the decision reads. */
export interface ExistingKey {
  state: KeyState;
  fingerprint: Uint8Array;
  /** True when `locked_until` is in the past or NULL, by the database clock. */
  leaseExpired: boolean;
}

/** What to do after a claim found the key already present (seed, "Decision logic"). */
export type Decision =
  /** Same key, different request: 422 (conformance 11). Checked first (conformance 12). */
  | { kind: 'mismatch' }
  /** Finished: replay the stored response (seed step 3, state='done'). */
  | { kind: 'replay' }
  /** Another worker holds a valid lease: 409 with Retry-After (conformance 13). */
  | { kind: 'in-progress' }
  /** The lease expired (the worker crashed): take over with a new fencing token (conformance 15). */
  | { kind: 'take-over' };

/**
 * The decision after a failed claim, exactly the seed's `decide`: the fingerprint mismatch
 * is checked before the state, so a different body while the first request runs is a 422,
 * not a 409. Pure.
 */
export function decide(existing: ExistingKey, requestFingerprint: Uint8Array): Decision {
  if (!sameFingerprint(existing.fingerprint, requestFingerprint)) return { kind: 'mismatch' };
  if (existing.state === KeyState.Done) return { kind: 'replay' };
  if (existing.leaseExpired) return { kind: 'take-over' };
  return { kind: 'in-progress' };
}
