/**
 * The principal of a request, as the scope its keys live in (protocol.md H6): never one global
 * scope, so two clients sending the same key can never see each other's responses or collide.
 * A request whose principal cannot be established is refused (401) before anything is claimed.
 */
import { sha256 } from '../core/fingerprint.js';
import { PUBLIC_SCOPE } from '../http/scope.js';
import type { HttpRequestInput } from '../http/options.js';
import type { PrincipalConfig } from './config.js';

/** Thrown by a scope resolver when the request names no principal it can verify; the gateway answers 401. */
export class PrincipalMissingError extends Error {
  constructor(readonly detail: string) {
    super(detail);
    this.name = 'PrincipalMissingError';
  }
}

/** A scope resolver for `HttpIdempotency`'s `scope` option. */
export type ScopeResolver = (request: HttpRequestInput) => Promise<string>;

/** Scope values the store takes as they are (1-255 characters); longer or odd ones are hashed. */
const PLAIN = /^[\x21-\x7e]{1,200}$/;

/**
 * The resolver for one principal rule.
 * - `{ header }`: `header:<value>` (hashed past 200 characters);
 * - `{ hash }`: `hash:<base64url SHA-256 of the header value>`; the credential is never stored;
 * - `{ jwt }`: `jwt:<sub>` of a JWT in `Authorization: Bearer`, verified with `jose` against the
 *   JWKS (keys fetched and cached by `createRemoteJWKSet`), `exp`/`nbf`, and `iss`/`aud` when set;
 * - `'none'`: the shared scope `public`.
 */
export function principalScope(config: PrincipalConfig): ScopeResolver {
  if (config === 'none') return async () => PUBLIC_SCOPE;
  if ('header' in config) {
    const name = config.header;
    return async (request) => {
      const value = request.headers.get(name);
      if (!value) throw new PrincipalMissingError(`This route needs the ${name} header, which names whose request it is.`);
      return PLAIN.test(value) ? `header:${value}` : `header#${hash(value)}`;
    };
  }
  if ('hash' in config) {
    const name = config.hash;
    return async (request) => {
      const value = request.headers.get(name);
      if (!value) throw new PrincipalMissingError(`This route needs the ${name} header (your credential).`);
      return `hash:${hash(value)}`;
    };
  }
  return jwtScope(config.jwt);
}

function jwtScope(options: { jwksUrl: string; issuer?: string | undefined; audience?: string | undefined }): ScopeResolver {
  // Loaded on first use: a gateway without JWT principals never needs jose.
  let verify: ((token: string) => Promise<string | undefined>) | undefined;
  const load = async () => {
    const jose = await import('jose');
    const keys = jose.createRemoteJWKSet(new URL(options.jwksUrl));
    const checks: { issuer?: string; audience?: string } = {};
    if (options.issuer !== undefined) checks.issuer = options.issuer;
    if (options.audience !== undefined) checks.audience = options.audience;
    return async (token: string) => (await jose.jwtVerify(token, keys, checks)).payload.sub;
  };
  return async (request) => {
    const authorization = request.headers.get('authorization') ?? '';
    const match = /^Bearer\s+([A-Za-z0-9_.~+/=-]+)\s*$/i.exec(authorization);
    if (!match) throw new PrincipalMissingError('This route needs Authorization: Bearer <JWT>.');
    verify ??= await load();
    let sub: string | undefined;
    try {
      sub = await verify(match[1]!);
    } catch (error) {
      const code = (error as { code?: string }).code;
      // The JWKS endpoint unreachable is the gateway's outage, not the client's fault.
      if (code === 'ERR_JWKS_TIMEOUT' || (error instanceof Error && !code)) throw error;
      throw new PrincipalMissingError(`The bearer token was refused (${code ?? 'invalid'}).`);
    }
    if (typeof sub !== 'string' || sub.length === 0) throw new PrincipalMissingError('The bearer token has no sub claim.');
    return PLAIN.test(sub) ? `jwt:${sub}` : `jwt#${hash(sub)}`;
  };
}

function hash(value: string): string {
  return sha256(Buffer.from(value)).toString('base64url');
}
