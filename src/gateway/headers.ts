/**
 * The headers that cross the gateway, both ways (docs/guides/gateway.md "What the upstream
 * gets"): hop-by-hop fields are dropped (RFC 9110 §7.6.1: the fixed list and every name the
 * `Connection` header lists), a replay marker never crosses (only the gateway says a response is
 * a replay), and the gateway adds the key's scope, fencing token and attempt number.
 */
import type { IncomingHttpHeaders } from 'node:http';

/** Header carrying the fencing token of the attempt (the store's token: higher on every takeover). */
export const FENCING_TOKEN_HEADER = 'idem-fencing-token';
/** Header carrying the attempt number: 1 for a fresh claim, 1 + the failed and crashed attempts before it otherwise. */
export const ATTEMPT_HEADER = 'idem-attempt';
/** Header carrying the scope the key lives in (the principal); fence on (scope, key). */
export const SCOPE_HEADER = 'idem-scope';

/** RFC 9110 §7.6.1 and the fields proxies treat as hop-by-hop (RFC 9112 §7.1 transfer codings, RFC 7230's `Keep-Alive`). */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'proxy-authenticate',
  'proxy-authorization',
]);

/** Replay markers: the draft's `Idempotent-Replayed` and the common `Idempotency-Replayed`. */
const REPLAY_MARKERS = new Set(['idempotent-replayed', 'idempotency-replayed']);

/** Headers the gateway sets itself: a client's own copy is dropped, never passed on. */
const GATEWAY_SET = new Set([FENCING_TOKEN_HEADER, ATTEMPT_HEADER, SCOPE_HEADER, 'host', 'content-length']);

/** The names a `Connection` header lists (those fields are hop-by-hop too). */
function connectionListed(value: string | string[] | undefined): Set<string> {
  const listed = new Set<string>();
  for (const line of Array.isArray(value) ? value : value ? [value] : []) {
    for (const name of line.split(',')) if (name.trim()) listed.add(name.trim().toLowerCase());
  }
  return listed;
}

/** What the gateway adds to a claimed request. */
export interface AttemptHeaders {
  scope: string;
  token: number;
  attempt: number;
}

/**
 * The request headers to send upstream: the client's end-to-end headers (its key included), with
 * `X-Forwarded-For`/`-Proto`/`-Host` appended, and the attempt's headers when it was claimed.
 */
export function upstreamRequestHeaders(
  incoming: IncomingHttpHeaders,
  forwarded: { clientAddress: string | undefined; proto: string },
  attempt: AttemptHeaders | undefined,
): Record<string, string | string[]> {
  const listed = connectionListed(incoming.connection);
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(incoming)) {
    if (value === undefined || HOP_BY_HOP.has(name) || listed.has(name) || REPLAY_MARKERS.has(name) || GATEWAY_SET.has(name)) continue;
    out[name] = value;
  }
  const prior = incoming['x-forwarded-for'];
  const address = forwarded.clientAddress ?? 'unknown';
  out['x-forwarded-for'] = prior ? `${Array.isArray(prior) ? prior.join(', ') : prior}, ${address}` : address;
  out['x-forwarded-proto'] ??= forwarded.proto;
  if (incoming.host) out['x-forwarded-host'] ??= incoming.host;
  if (attempt) {
    out[SCOPE_HEADER] = attempt.scope;
    out[FENCING_TOKEN_HEADER] = String(attempt.token);
    out[ATTEMPT_HEADER] = String(attempt.attempt);
  }
  return out;
}

/** The upstream's response headers as fetch `Headers`, without hop-by-hop fields or a replay marker. */
export function downstreamResponseHeaders(incoming: Record<string, string | string[] | undefined>): Headers {
  const listed = connectionListed(incoming.connection);
  const out = new Headers();
  for (const [name, value] of Object.entries(incoming)) {
    const lower = name.toLowerCase();
    if (value === undefined || HOP_BY_HOP.has(lower) || listed.has(lower) || REPLAY_MARKERS.has(lower) || lower === 'content-length') continue;
    if (Array.isArray(value)) for (const v of value) out.append(lower, v);
    else out.set(lower, value);
  }
  return out;
}
