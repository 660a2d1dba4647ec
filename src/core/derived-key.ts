import { createHash } from 'node:crypto';

/**
 * The idempotency key for a downstream call (protocol.md K11), derived from
 * the scope, the client's key, the claim and the call's name.
 *
 * The scope is part of the hash: two tenants that both send key `abc` must not share one
 * charge at the payment provider. The claim id is too: it stays the same across retries and
 * takeovers of one claim (so repeating an in-flight call after a crash is deduplicated
 * downstream), but changes when the key is claimed anew after retention or a discard, so a
 * reused key never receives the old downstream result. The fencing token is not part of it.
 * Shape: `<name>:<43 base64url characters>`, at most 108 characters, printable ASCII, within
 * Stripe's 255-character limit.
 *
 * @param claimId the claim's id (`Execution.claimId`; a UUID from the store)
 */
export function deriveKey(scope: string, key: string, claimId: string, name: string): string {
  const digest = createHash('sha256')
    .update(`idem-derived-v2\0${scope.length}:${scope}\0${key.length}:${key}\0${claimId.length}:${claimId}\0${name}`)
    .digest('base64url');
  return `${name}:${digest}`;
}
