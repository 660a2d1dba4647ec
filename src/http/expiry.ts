/** The expiry header (protocol.md H40): when a key's stored response stops being replayed. */
import { InvalidOptionError } from '../core/errors.js';
import type { StoredResponse } from '../store/types.js';

/** The expiry header's default name (protocol.md H40). */
export const EXPIRES_HEADER = 'Idempotency-Key-Expires';

/**
 * The expiry header's name from the `expiresHeader` option, or undefined when off.
 * @throws {InvalidOptionError} for anything but true, false or a header name
 */
export function expiresHeaderName(expires: boolean | string | undefined): string | undefined {
  if (expires !== undefined && typeof expires !== 'boolean' && !(typeof expires === 'string' && /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(expires))) {
    throw new InvalidOptionError('idem: expiresHeader must be true, false or a header name');
  }
  return expires === true ? EXPIRES_HEADER : expires || undefined;
}

/** An instant as an HTTP-date (IMF-fixdate, RFC 9110 §5.6.7), whole seconds. */
export function httpDate(ms: number): string {
  return new Date(Math.floor(ms / 1000) * 1000).toUTCString();
}

/** A copy of `stored` with one more header (the stored record and any cached copy stay as they are). */
export function withHeader(stored: StoredResponse, name: string, value: string): StoredResponse {
  return { status: stored.status, headers: [...stored.headers, [name.toLowerCase(), value]], body: stored.body };
}

/** `response` with the header `name: value`; a copy when its headers are immutable. */
export function withResponseHeader(response: Response, name: string, value: string): Response {
  try {
    response.headers.set(name, value);
    return response;
  } catch {
    // Immutable headers (a fetched or framework-made Response): the same response, one header more.
    const headers = new Headers(response.headers);
    headers.set(name, value);
    return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
  }
}
