import { sha256 } from '../core/fingerprint.js';

/** Scope of requests that carry no credential. */
export const PUBLIC_SCOPE = 'public';

/**
 * The default scope, safe without configuration (protocol.md H6): a SHA-256 of the request's
 * `Authorization` header, so two API credentials can never receive each other's responses or
 * collide on a key; without one, a SHA-256 of the `Cookie` header (cookie sessions are
 * credentials too); without either, the shared scope `public`. Credentials are never
 * stored, only their hashes.
 *
 * The default errs on the side of privacy: if a credential changes between two attempts
 * (an OAuth access token refreshed mid-retry, a cookie rotated), the retry lands in a new
 * scope and runs again. Configure a resolver (`scope: (req) => tenantId`) that returns the
 * authenticated principal's stable id to avoid that.
 */
export function credentialScope(headers: Headers): string {
  const authorization = headers.get('authorization');
  if (authorization) return 'auth:' + sha256(Buffer.from(authorization)).toString('base64url');
  const cookie = headers.get('cookie');
  if (cookie) return 'cookie:' + sha256(Buffer.from(cookie)).toString('base64url');
  return PUBLIC_SCOPE;
}
