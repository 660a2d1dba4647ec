/**
 * What crosses the RPC boundary between a Worker's `DurableObjectStore` (store.ts) and the key's
 * object (key-object.ts): plain structured-clone values, one key per object, so no call names the
 * scope and key but the claim.
 */
import type { KeyRecord, PhaseResults } from '../store/types.js';

/** A {@link KeyRecord} as the object sends it: `createdAt` in epoch ms (the store makes it a Date). */
export type WireRecord = Omit<KeyRecord, 'createdAt'> & { createdAt: number };

/** The object's answer to a claim. */
export type WireClaim = { kind: 'claimed'; token: number; claimId: string; retentionRemainingMs: number } | { kind: 'exists'; record: WireRecord };

/** The object's answer to a takeover. */
export type WireTakeOver =
  | { kind: 'taken'; token: number; claimId: string; recoveryPoint: string; phaseResults: PhaseResults; failedAttempts: number }
  | { kind: 'lost' };

/** A commit's record as sent: a phase's result already JSON (the object stores it as it is). */
export type WireCommit = { kind: 'phase'; phase: string; result: unknown; leaseMs: number } | { kind: 'finish'; response: KeyRecord['response'] & object };
