/**
 * The dashboard's guards (docs/dashboard.md): which `Host` it answers (no DNS rebinding), the
 * headers on every response (a strict Content-Security-Policy), the bearer token and the
 * `Origin` check of its actions.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type http from 'node:http';

/** Listen addresses that only this machine reaches. */
export const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/** `0.0.0.0` and `::`: every interface; no single Host names them. */
export const WILDCARD = new Set(['0.0.0.0', '::', '[::]']);

/**
 * The `Host` header values the dashboard answers, lowercased: the listen address with its port
 * (on loopback `localhost`, `127.0.0.1` and `[::1]` alike), and each `--allowed-host` name,
 * which matches with any port unless it names one. Port 80 also matches without a port.
 */
export class HostAllowList {
  private readonly exact = new Set<string>();
  private readonly anyPort = new Set<string>();

  constructor(listenHost: string, port: number, allowed: readonly string[]) {
    const names = LOOPBACK.has(listenHost) ? ['localhost', '127.0.0.1', '[::1]'] : WILDCARD.has(listenHost) ? [] : [bracket(listenHost)];
    for (const name of names) {
      this.exact.add(`${name}:${port}`.toLowerCase());
      if (port === 80) this.exact.add(name.toLowerCase());
    }
    for (const raw of allowed) {
      const value = raw.trim().toLowerCase();
      // A port follows a name, an IPv4 address or a bracketed IPv6 one; a bare IPv6 has none.
      if (/^(\[[^\]]+\]|[^:]+):\d+$/.test(value)) this.exact.add(value);
      else this.anyPort.add(bracket(value));
    }
  }

  /** True when `host` (a `Host` header, or an origin's host) is one of the dashboard's. */
  allows(host: string | undefined): boolean {
    if (!host) return false;
    const value = host.trim().toLowerCase();
    if (this.exact.has(value)) return true;
    return this.anyPort.has(value.replace(/:\d+$/, ''));
  }

  /** The accepted values, for the refusal's reason. */
  describe(): string {
    return [...this.exact, ...[...this.anyPort].map((name) => `${name}[:any port]`)].join(', ');
  }
}

/** `host` as it stands in a Host header: an IPv6 address in brackets. */
export function bracket(host: string): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
}

const sha256 = (text: string) => `'sha256-${createHash('sha256').update(text, 'utf8').digest('base64')}'`;

/**
 * The Content-Security-Policy of every response: nothing is allowed but the page's own inline
 * script and style (by SHA-256 hash) and requests to its own origin; no framing, no `<base>`,
 * no form submission.
 */
export function contentSecurityPolicy(script: string, style: string): string {
  return [
    "default-src 'none'",
    `script-src ${sha256(script)}`,
    `style-src ${sha256(style)}`,
    "connect-src 'self'",
    "img-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/** The security headers sent with every response, whatever its status. */
export function securityHeaders(csp: string): Record<string, string> {
  return {
    'content-security-policy': csp,
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
    'x-frame-options': 'DENY',
    'cross-origin-resource-policy': 'same-origin',
    'cache-control': 'no-store',
  };
}

/** True when the request carries `Authorization: Bearer <token>` (constant-time compare). */
export function hasToken(req: http.IncomingMessage, token: string): boolean {
  const header = req.headers.authorization;
  if (!header?.startsWith('Bearer ')) return false;
  const a = Buffer.from(header.slice(7));
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * Why an action's `Origin` is refused, or undefined when it is the dashboard's own: present,
 * `http:` or `https:` (behind a TLS proxy), and its host one the dashboard answers.
 */
export function originRefusal(req: http.IncomingMessage, hosts: HostAllowList): string | undefined {
  const origin = req.headers.origin;
  if (!origin) return 'an action needs an Origin header (browsers send it; with curl add -H "Origin: http://<dashboard host>")';
  let parsed: URL;
  try {
    parsed = new URL(origin);
  } catch {
    return `Origin ${JSON.stringify(origin)} is not a URL`;
  }
  if ((parsed.protocol !== 'http:' && parsed.protocol !== 'https:') || !hosts.allows(parsed.host)) {
    return `Origin ${JSON.stringify(origin)} is not this dashboard's`;
  }
  return undefined;
}
