import { createHash } from 'node:crypto';

/** Scope of requests that carry no credential. */
export const PUBLIC_SCOPE = 'public';

/**
 * The default scope, safe without configuration (conformance 6): a SHA-256 of the request's
 * `Authorization` header, so two API credentials can never receive each other's responses or
 * collide on a key. The credential itself is never stored, only its hash. Requests without
 * `Authorization` share the scope `public`.
 *
 * Configure a resolver (`scope: (req) => tenantId`) when credentials rotate between retries
 * (OAuth access tokens refreshed mid-retry would otherwise land in a new scope and run twice)
 * or when the identity comes from a cookie session.
 */
export function credentialScope(headers: Headers): string {
  const authorization = headers.get('authorization');
  if (!authorization) return PUBLIC_SCOPE;
  return 'auth:' + createHash('sha256').update(authorization).digest('base64url');
}
