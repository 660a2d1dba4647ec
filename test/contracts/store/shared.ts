/**
 * What the parts of the store contract share: the constants, claim and commit builders, and the
 * context each part gets (the store of the running test and the factory's backdoors).
 */
import assert from 'node:assert/strict';
import type { ClaimInput, ClaimResult, CommitRecord, IdempotencyStore, KeyRecord, KeyRef, StoredResponse } from '../../../src/store/types.js';
import type { StoreCapabilities, StoreHarness } from '../../helpers/stores.js';

export const SCOPE = 'tenant-1';
export const LONG_LEASE_MS = 60_000;
export const RETENTION_MS = 60_000;
/** How far `age` moves a key back: past RETENTION_MS and past any LONG_LEASE_MS lease. */
export const HOUR_MS = 60 * 60_000;
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export const fp = (n: number): Uint8Array => new Uint8Array(32).fill(n);

/** A claim of `key` in SCOPE with a long lease and RETENTION_MS; `overrides` change any field. */
export function claimInput(key: string, overrides: Partial<ClaimInput> = {}): ClaimInput {
  return { scope: SCOPE, key, fingerprint: fp(1), leaseMs: LONG_LEASE_MS, retentionMs: RETENTION_MS, ...overrides };
}

/** The token of a claim that must have been won. */
export function claimedToken(result: ClaimResult): number {
  assert.equal(result.kind, 'claimed', `expected a claim, got ${JSON.stringify(result)}`);
  return (result as { token: number }).token;
}

export const claimedId = (result: ClaimResult): string => {
  assert.equal(result.kind, 'claimed', `expected a claim, got ${JSON.stringify(result)}`);
  const { claimId } = result as { claimId: string };
  assert.match(claimId, UUID);
  return claimId;
};

export const existing = (result: ClaimResult) => {
  assert.equal(result.kind, 'exists', `expected an existing record, got ${JSON.stringify(result)}`);
  return (result as Extract<ClaimResult, { kind: 'exists' }>).record;
};

export const phase =
  (name: string, leaseMs = LONG_LEASE_MS) =>
  (value: unknown): CommitRecord => ({ kind: 'phase', phase: name, result: value, leaseMs });
export const finishWith = (response: StoredResponse) => (): CommitRecord => ({ kind: 'finish', response });
export const empty = (status = 200): StoredResponse => ({ status, headers: [], body: new Uint8Array() });

/** What every part of the contract works with; `h()` and `store()` are the running test's. */
export interface ContractContext {
  h(): StoreHarness;
  store(): IdempotencyStore;
  caps: StoreCapabilities;
  /** A KeyRef in SCOPE. */
  ref(key: string, token: number): KeyRef;
  /** Moves the key an hour back: past RETENTION_MS and past any LONG_LEASE_MS lease. */
  age(key: string): Promise<void>;
  /** Gives the key a valid lease for LONG_LEASE_MS, as a live worker's heartbeat would. */
  renewLease(key: string): Promise<void>;
  snapshot(key: string): Promise<unknown>;
  get(key: string, scope?: string): Promise<KeyRecord | undefined>;
  /**
   * Claims `key` with a lease that is already over, then takes it over. `ref` holds the new
   * token; `stale` the claim's token, which the takeover superseded.
   */
  claimAndTakeOver(key: string): Promise<{ ref: KeyRef; stale: KeyRef }>;
}

/**
 * The effects that took hold: `atomic` on a store whose commit is one transaction with its
 * effects; `notAtomic` on one with `atomicEffects: false` (RedisStore's NoTransaction), where
 * effects that ran before a fenced or failed commit stay, and the contract checks that nothing
 * was recorded instead.
 */
export async function expectEffects(ctx: ContractContext, atomic: string[], notAtomic: string[], message?: string): Promise<void> {
  assert.deepEqual(await ctx.h().effects(), ctx.caps.atomicEffects === false ? notAtomic : atomic, message);
}
