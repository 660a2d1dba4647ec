import { KeyState } from './constants.js';
import { sameFingerprint } from './fingerprint.js';

/** The parts of an existing key row that the decision reads. */
export interface ExistingKey {
  state: KeyState;
  fingerprint: Uint8Array;
  /** True when `locked_until` is in the past or NULL, by the database clock. */
  leaseExpired: boolean;
}

/** What to do after a claim found the key already present (protocol.md K3). */
export type Decision =
  /** Same key, different request: 422 (protocol.md H11). Checked first (protocol.md H12). */
  | { kind: 'mismatch' }
  /** Finished: replay the stored response (protocol.md K3). */
  | { kind: 'replay' }
  /** Another worker holds a valid lease: 409 with Retry-After (protocol.md H13). */
  | { kind: 'in-progress' }
  /** The lease expired (the worker crashed): take over with a new fencing token (protocol.md H15). */
  | { kind: 'take-over' };

/**
 * The decision after a failed claim, exactly the decision table of protocol.md K3: the fingerprint mismatch
 * is checked before the state, so a different body while the first request runs is a 422,
 * not a 409. Pure.
 */
export function decide(existing: ExistingKey, requestFingerprint: Uint8Array): Decision {
  if (!sameFingerprint(existing.fingerprint, requestFingerprint)) return { kind: 'mismatch' };
  if (existing.state === KeyState.Done) return { kind: 'replay' };
  if (existing.leaseExpired) return { kind: 'take-over' };
  return { kind: 'in-progress' };
}
