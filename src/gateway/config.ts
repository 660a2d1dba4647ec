/**
 * The gateway's configuration (docs/guides/gateway.md "Configuration"): its shape, and its
 * validation, which names the bad field (`routes[1].methods[0]`) so an operator can fix a file
 * without reading code. A file is JSON or YAML ({@link loadGatewayConfig}).
 */
import { readFile } from 'node:fs/promises';
import { InvalidOptionError } from '../core/errors.js';

/** Whose request it is (protocol.md H6): the scope a key lives in. Never one global scope. */
export type PrincipalConfig =
  /** The value of a header an earlier hop set and the client cannot (a tenant id from your auth proxy). */
  | { header: string }
  /** A SHA-256 of a credential header (`Authorization`, `X-Api-Key`): the credential itself is never stored. */
  | { hash: string }
  /** The `sub` of a JWT in `Authorization: Bearer`, verified against a JWKS (signature, `exp`, and `iss`/`aud` when given). */
  | { jwt: { jwksUrl: string; issuer?: string | undefined; audience?: string | undefined } }
  /** Every client shares one scope: only for a single-tenant upstream, and only when said explicitly. */
  | 'none';

/** One idempotent route: which requests are claimed and how they are fingerprinted. */
export interface RouteConfig {
  /** Methods claimed on this path. @default ['POST', 'PATCH'] */
  methods: string[];
  /** Path pattern: exact (`/v1/charges`), or a prefix ending in `*` (`/v1/*`). */
  path: string;
  /** A claimed request without a key gets 400 (protocol.md H2). @default true */
  required: boolean;
  /** Request headers that are part of the fingerprint (protocol.md H7). @default [] */
  fingerprintHeaders: string[];
  /** JSON pointers removed from a JSON body before fingerprinting (protocol.md K2). @default [] */
  fingerprintIgnore: string[];
  /** The route's principal; the gateway's `principal` when absent. */
  principal?: PrincipalConfig | undefined;
  /** Request body limit in bytes: larger bodies get 413 before anything is claimed (protocol.md H27). */
  maxBodyBytes?: number | undefined;
}

/** The whole configuration. Durations in ms, sizes in bytes. */
export interface GatewayConfig {
  /** Base URL requests are forwarded to, e.g. `http://127.0.0.1:9000`. */
  upstream: string;
  /** Where keys live, for the CLI: a `postgres://` or `mysql://` URL, or `memory` (one process, tests). `createGateway` takes a store object instead. */
  store?: string | undefined;
  /** Host and port to listen on: `:8080`, `127.0.0.1:8080`, `0` for any free port. @default ':8080' */
  listen: string;
  /** Default principal of every route. */
  principal?: PrincipalConfig | undefined;
  routes: RouteConfig[];
  /** Key table (SQL stores). @default 'idempotency_keys' */
  table: string;
  /** Lease of a claim; the heartbeat renews it while the upstream works. @default 60000 */
  leaseMs: number;
  /** How long a key and its response are kept. @default 86400000 (24 h) */
  retentionMs: number;
  /** Time the upstream has to send its response head: past it, 504 and the key stays held. @default 30000 */
  upstreamTimeoutMs: number;
  /** Time a client has to send its whole request (head and body); past it the connection is cut. @default 30000 */
  requestTimeoutMs: number;
  /** Default request body limit of every route. @default 1048576 (1 MiB) */
  maxBodyBytes: number;
  /** Largest upstream response kept for replay (larger: the library's too-large rule). @default 33554432 */
  maxResponseBytes: number;
  /** Response headers stored and replayed besides the library's defaults; Set-Cookie and credentials never are. @default [] */
  replayHeaders: string[];
  /** Status for a key reused with another request. @default 422 */
  mismatchStatus: 400 | 409 | 422;
  /** How long a shutdown waits for in-flight requests before closing their connections. @default 30000 */
  drainMs: number;
}

/** The fields a caller gives: everything but `upstream` and `routes` has a default. */
export type GatewayConfigInput = Partial<GatewayConfig> & Pick<GatewayConfig, 'upstream' | 'routes'>;

/** A configuration field that is missing or wrong; `field` is its path, e.g. `routes[0].path`. */
export class GatewayConfigError extends InvalidOptionError {
  constructor(
    readonly field: string,
    problem: string,
  ) {
    super(`idem gateway: ${field} ${problem}`);
    this.name = 'GatewayConfigError';
  }
}

const TOP_FIELDS = new Set([
  'upstream',
  'store',
  'listen',
  'principal',
  'routes',
  'table',
  'leaseMs',
  'retentionMs',
  'upstreamTimeoutMs',
  'requestTimeoutMs',
  'maxBodyBytes',
  'maxResponseBytes',
  'replayHeaders',
  'mismatchStatus',
  'drainMs',
]);
const ROUTE_FIELDS = new Set(['methods', 'path', 'required', 'fingerprintHeaders', 'fingerprintIgnore', 'principal', 'maxBodyBytes']);
const METHOD = /^[A-Z]+$/;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/**
 * Checks a parsed configuration and fills its defaults.
 * @throws {GatewayConfigError} naming the first bad field
 */
export function parseGatewayConfig(raw: unknown): GatewayConfig {
  const top = object(raw, 'config');
  unknownFields(top, TOP_FIELDS, '');
  const upstream = url(top.upstream, 'upstream');
  const principal = top.principal === undefined ? undefined : parsePrincipal(top.principal, 'principal');
  if (!Array.isArray(top.routes) || top.routes.length === 0) throw new GatewayConfigError('routes', 'must be a non-empty list of routes');
  const maxBodyBytes = whole(top.maxBodyBytes, 'maxBodyBytes', 1_048_576, 0);
  const routes = top.routes.map((route, i) => parseRoute(route, `routes[${i}]`, principal));
  const leaseMs = whole(top.leaseMs, 'leaseMs', 60_000, 1);
  const upstreamTimeoutMs = whole(top.upstreamTimeoutMs, 'upstreamTimeoutMs', 30_000, 1);
  const mismatchStatus = top.mismatchStatus ?? 422;
  if (mismatchStatus !== 400 && mismatchStatus !== 409 && mismatchStatus !== 422) throw new GatewayConfigError('mismatchStatus', 'must be 400, 409 or 422');
  return {
    upstream,
    store: top.store === undefined ? undefined : text(top.store, 'store'),
    listen: listenAddress(top.listen ?? ':8080'),
    principal,
    routes,
    table: text(top.table ?? 'idempotency_keys', 'table'),
    leaseMs,
    retentionMs: whole(top.retentionMs, 'retentionMs', 86_400_000, 1),
    upstreamTimeoutMs,
    requestTimeoutMs: whole(top.requestTimeoutMs, 'requestTimeoutMs', 30_000, 1),
    maxBodyBytes,
    maxResponseBytes: whole(top.maxResponseBytes, 'maxResponseBytes', 33_554_432, 0),
    replayHeaders: headerList(top.replayHeaders, 'replayHeaders'),
    mismatchStatus,
    drainMs: whole(top.drainMs, 'drainMs', 30_000, 0),
  };
}

/**
 * Reads a configuration file: YAML when it ends in `.yaml`/`.yml`, else JSON.
 * @throws {GatewayConfigError} unreadable, unparsable, or invalid (field `config`)
 */
export async function loadGatewayConfig(path: string): Promise<Record<string, unknown>> {
  let source: string;
  try {
    source = await readFile(path, 'utf8');
  } catch (error) {
    throw new GatewayConfigError('config', `file ${path} cannot be read: ${(error as Error).message}`);
  }
  try {
    if (/\.ya?ml$/i.test(path)) {
      const { parse } = await import('yaml');
      return object(parse(source), 'config');
    }
    return object(JSON.parse(source), 'config');
  } catch (error) {
    if (error instanceof GatewayConfigError) throw error;
    throw new GatewayConfigError('config', `file ${path} is not valid ${/\.ya?ml$/i.test(path) ? 'YAML' : 'JSON'}: ${(error as Error).message.split('\n')[0]}`);
  }
}

function parseRoute(raw: unknown, at: string, fallback: PrincipalConfig | undefined): RouteConfig {
  const route = object(raw, at);
  unknownFields(route, ROUTE_FIELDS, `${at}.`);
  const path = text(route.path, `${at}.path`);
  if (!path.startsWith('/')) throw new GatewayConfigError(`${at}.path`, `must start with / (got ${JSON.stringify(path)})`);
  if (path.indexOf('*') !== -1 && path.indexOf('*') !== path.length - 1) throw new GatewayConfigError(`${at}.path`, 'may hold one * only, at its end');
  const methods = route.methods === undefined ? ['POST', 'PATCH'] : list(route.methods, `${at}.methods`);
  methods.forEach((m, i) => {
    if (!METHOD.test(m)) throw new GatewayConfigError(`${at}.methods[${i}]`, `must be an upper-case HTTP method (got ${JSON.stringify(m)})`);
  });
  const principal = route.principal === undefined ? fallback : parsePrincipal(route.principal, `${at}.principal`);
  if (principal === undefined) {
    throw new GatewayConfigError(`${at}.principal`, 'is not set (nor the top-level principal): name whose requests these are, or say principal: none');
  }
  if (route.required !== undefined && typeof route.required !== 'boolean') throw new GatewayConfigError(`${at}.required`, 'must be true or false');
  const pointers = route.fingerprintIgnore === undefined ? [] : list(route.fingerprintIgnore, `${at}.fingerprintIgnore`);
  pointers.forEach((p, i) => {
    if (!p.startsWith('/')) throw new GatewayConfigError(`${at}.fingerprintIgnore[${i}]`, `must be a JSON pointer starting with / (got ${JSON.stringify(p)})`);
  });
  return {
    methods,
    path,
    required: route.required ?? true,
    fingerprintHeaders: headerList(route.fingerprintHeaders, `${at}.fingerprintHeaders`),
    fingerprintIgnore: pointers,
    principal,
    maxBodyBytes: route.maxBodyBytes === undefined ? undefined : whole(route.maxBodyBytes, `${at}.maxBodyBytes`, 0, 0),
  };
}

function parsePrincipal(raw: unknown, at: string): PrincipalConfig {
  if (raw === 'none') return 'none';
  const p = object(raw, at);
  const kinds = Object.keys(p);
  if (kinds.length !== 1 || !['header', 'hash', 'jwt'].includes(kinds[0]!)) {
    throw new GatewayConfigError(at, "must be 'none' or an object with exactly one of header, hash, jwt");
  }
  if (p.header !== undefined) return { header: headerName(p.header, `${at}.header`) };
  if (p.hash !== undefined) return { hash: headerName(p.hash, `${at}.hash`) };
  const jwt = object(p.jwt, `${at}.jwt`);
  unknownFields(jwt, new Set(['jwksUrl', 'issuer', 'audience']), `${at}.jwt.`);
  return {
    jwt: {
      jwksUrl: url(jwt.jwksUrl, `${at}.jwt.jwksUrl`),
      issuer: jwt.issuer === undefined ? undefined : text(jwt.issuer, `${at}.jwt.issuer`),
      audience: jwt.audience === undefined ? undefined : text(jwt.audience, `${at}.jwt.audience`),
    },
  };
}

function object(raw: unknown, at: string): Record<string, unknown> {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new GatewayConfigError(at, 'must be an object');
  return raw as Record<string, unknown>;
}

function unknownFields(value: Record<string, unknown>, known: Set<string>, prefix: string): void {
  for (const name of Object.keys(value)) {
    if (!known.has(name)) throw new GatewayConfigError(prefix + name, `is not a known field (known: ${[...known].join(', ')})`);
  }
}

function text(raw: unknown, at: string): string {
  if (typeof raw !== 'string' || raw.length === 0) throw new GatewayConfigError(at, 'must be a non-empty string');
  return raw;
}

function list(raw: unknown, at: string): string[] {
  if (!Array.isArray(raw)) throw new GatewayConfigError(at, 'must be a list of strings');
  return raw.map((v, i) => text(v, `${at}[${i}]`));
}

function headerName(raw: unknown, at: string): string {
  const name = text(raw, at);
  if (!TOKEN.test(name)) throw new GatewayConfigError(at, `must be a header name (got ${JSON.stringify(name)})`);
  return name.toLowerCase();
}

function headerList(raw: unknown, at: string): string[] {
  if (raw === undefined) return [];
  return list(raw, at).map((name, i) => headerName(name, `${at}[${i}]`));
}

function whole(raw: unknown, at: string, fallback: number, min: number): number {
  if (raw === undefined) return fallback;
  if (typeof raw !== 'number' || !Number.isSafeInteger(raw) || raw < min)
    throw new GatewayConfigError(at, `must be a whole number >= ${min} (got ${JSON.stringify(raw)})`);
  return raw;
}

function url(raw: unknown, at: string): string {
  const value = text(raw, at);
  let parsed: URL;
  try {
    parsed = new URL(value);
  } catch {
    throw new GatewayConfigError(at, `must be an absolute URL (got ${JSON.stringify(value)})`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')
    throw new GatewayConfigError(at, `must be an http:// or https:// URL (got ${parsed.protocol}//)`);
  return value.replace(/\/+$/, '');
}

function listenAddress(raw: unknown): string {
  const value = typeof raw === 'number' ? String(raw) : text(raw, 'listen');
  if (!/^((\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]*):)?\d{1,5}$/.test(value) || Number(value.slice(value.lastIndexOf(':') + 1)) > 65535) {
    throw new GatewayConfigError('listen', `must be [host]:port, e.g. :8080 or 127.0.0.1:8080 (got ${JSON.stringify(value)})`);
  }
  return value;
}

/** `listen` as host and port for `server.listen` (host `undefined`: every interface). */
export function listenParts(listen: string): { host: string | undefined; port: number } {
  const colon = listen.lastIndexOf(':');
  if (colon === -1) return { host: undefined, port: Number(listen) };
  const host = listen.slice(0, colon).replace(/^\[|\]$/g, '');
  return { host: host === '' ? undefined : host, port: Number(listen.slice(colon + 1)) };
}
