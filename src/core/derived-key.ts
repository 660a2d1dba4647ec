import { createHash } from 'node:crypto';

/**
 * The idempotency key for a downstream call (seed step 4: "`<key>:authorize`"), derived from
 * the scope, the client's key and the call's name.
 *
 * The scope is part of the hash: two tenants that both send key `abc` must not share one
 * charge at the payment provider. The result is stable across retries and takeovers (it does
 * not contain the fencing token), so repeating an in-flight call after a crash is deduplicated
 * downstream. Shape: `<name>:<43 base64url characters>`, at most 108 characters, printable
 * ASCII, within Stripe's 255-character limit.
 */
export function deriveKey(scope: string, key: string, name: string): string {
  const digest = createHash('sha256')
    .update(`idem-derived-v1\0${scope.length}:${scope}\0${key.length}:${key}\0${name}`)
    .digest('base64url');
  return `${name}:${digest}`;
}
