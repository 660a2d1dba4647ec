/**
 * `idem dashboard`: a page over the key table, served by node:http on loopback (docs/dashboard.md).
 * The page (`dashboard-page.ts`) fetches `/api/overview` and `/api/inspect`; both answer JSON from
 * the store's `dashboard` and `dashboardInspect` (`PostgresStore`,
 * `MySqlStore`: no bodies, no credentials, no phase results).
 *
 * Guards (`dashboard-guard.ts`): every request must name the dashboard in its `Host` (else 421,
 * so a DNS-rebinding page reads nothing); every response carries a strict CSP. Reads need
 * `Authorization: Bearer <token>` when a token is set (a non-loopback host requires one).
 * Actions (`dashboard-actions.ts`: release, forget) are POSTs and always need the token in that header and the
 * dashboard's own `Origin`; without a token they are disabled.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { IdempotencyTelemetry } from '../engine/telemetry.js';
import type { CliStore } from './store.js';
import { DASHBOARD_ACTIONS, type DashboardAction, operatorAction } from './dashboard-actions.js';
import { bracket, contentSecurityPolicy, HostAllowList, hasToken, LOOPBACK, originRefusal, securityHeaders, WILDCARD } from './dashboard-guard.js';
import { DASHBOARD_PAGE, DASHBOARD_SCRIPT, DASHBOARD_STYLE } from './dashboard-page.js';

/** Options of {@link startDashboard}. */
export interface DashboardOptions {
  /** A store with the operator capability and the dashboard's reads (`PostgresStore`, `MySqlStore`). */
  store: CliStore;
  /** @default '127.0.0.1' */
  host?: string;
  /** 0: any free port. @default 7117 */
  port?: number;
  /** Required unless `host` is a loopback address; enables actions. */
  token?: string;
  /**
   * More `Host` names to answer besides the listen address, e.g. the name a reverse proxy
   * forwards (`idem.example.com`; with `:port` only that port). Required for `0.0.0.0` / `::`.
   */
  allowedHosts?: string[];
  /** Rows older than this are past retention, in ms. @default 86_400_000 */
  retentionMs?: number;
  /** Reports each action (`idem/otel`; the CLI passes the global providers' when installed). */
  telemetry?: IdempotencyTelemetry;
}

/** A running dashboard. */
export interface Dashboard {
  /** The page's URL (with `?token=` when a token is set: the page moves it into a header). */
  url: string;
  close(): Promise<void>;
}

/** A request body larger than this is refused (an action's body is a few dozen bytes). */
const MAX_BODY_BYTES = 4096;

/**
 * Serves the dashboard until `close()`.
 * @throws {Error} for a non-loopback host without a token, a wildcard host without
 *   `allowedHosts`, or when the port is taken
 */
export async function startDashboard(options: DashboardOptions): Promise<Dashboard> {
  const host = options.host ?? '127.0.0.1';
  const token = options.token || undefined;
  if (!LOOPBACK.has(host) && !token)
    throw new Error(`--host ${host} is not a loopback address: set --token (or IDEM_DASHBOARD_TOKEN) so the page is not open to anyone`);
  if (WILDCARD.has(host) && !options.allowedHosts?.length)
    throw new Error(`--host ${host} listens on every interface: name the host clients use with --allowed-host (repeatable)`);
  const retentionMs = options.retentionMs ?? 86_400_000;
  const store = options.store;
  const headers = securityHeaders(contentSecurityPolicy(DASHBOARD_SCRIPT, DASHBOARD_STYLE));
  // Replaced once the port is known (port 0 picks one); no request is read before that.
  let hosts = new HostAllowList(host, 0, []);

  const server = http.createServer(async (req, res) => {
    const send = (status: number, type: string, body: string, extra: Record<string, string> = {}) => {
      res.writeHead(status, { ...headers, ...extra, 'content-type': type });
      res.end(body);
    };
    const json = (status: number, body: unknown) => send(status, 'application/json', JSON.stringify(body));
    // DNS rebinding: a page on another name resolved to this address is refused before anything.
    if (!hosts.allows(req.headers.host)) {
      return send(
        421,
        'text/plain',
        `Host ${JSON.stringify(req.headers.host ?? '')} is not this dashboard's (allowed: ${hosts.describe()}); behind a proxy, add --allowed-host\n`,
      );
    }
    const url = new URL(req.url ?? '/', 'http://dashboard');
    try {
      const action = url.pathname.startsWith('/api/') ? url.pathname.slice(5) : '';
      if ((DASHBOARD_ACTIONS as readonly string[]).includes(action)) {
        if (req.method !== 'POST') return send(405, 'text/plain', 'POST only\n', { allow: 'POST' });
        if (!token) return json(403, { error: 'actions are disabled: start idem dashboard with --token <secret> (or IDEM_DASHBOARD_TOKEN) to enable them' });
        const badOrigin = originRefusal(req, hosts);
        if (badOrigin) return json(403, { error: badOrigin });
        if (!hasToken(req, token)) return json(401, { error: 'an action needs Authorization: Bearer <token>' });
        if (!/^application\/json\b/.test(req.headers['content-type'] ?? '')) return json(415, { error: 'send the action as application/json' });
        const body = await readBody(req);
        if (body === undefined) return json(413, { error: `body over ${MAX_BODY_BYTES} bytes` });
        const outcome = await operatorAction(action as DashboardAction, store, body, retentionMs, options.telemetry);
        return json(outcome.status, outcome.body);
      }
      if (req.method !== 'GET' && req.method !== 'HEAD')
        return send(405, 'text/plain', 'read-only: actions are POSTs to /api/release and /api/forget\n', { allow: 'GET' });
      // The page holds no data: served to any allowed Host; it reads the token from its URL.
      if (url.pathname === '/') return send(200, 'text/html; charset=utf-8', DASHBOARD_PAGE);
      if (!url.pathname.startsWith('/api/')) return send(404, 'text/plain', 'not found\n');
      if (token && !hasToken(req, token)) return json(401, { error: 'token required: Authorization: Bearer <token> (open the page with ?token=)' });
      if (url.pathname === '/api/overview') return json(200, { ...(await store.dashboard(retentionMs)), actions: token !== undefined });
      if (url.pathname === '/api/inspect') {
        const scope = url.searchParams.get('scope') ?? '';
        const key = url.searchParams.get('key') ?? '';
        if (!scope || !key) return json(400, { error: 'scope and key are required' });
        const found = await store.dashboardInspect(scope, key, retentionMs);
        return found ? json(200, found) : json(404, { error: 'no such key' });
      }
      return send(404, 'text/plain', 'not found\n');
    } catch (error) {
      return json(503, { error: `database: ${(error as Error)?.message ?? error}` });
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 7117, host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  hosts = new HostAllowList(host, port, options.allowedHosts ?? []);
  const shown = WILDCARD.has(host) ? options.allowedHosts![0]! : bracket(host);
  const origin = /:\d+$/.test(shown) ? shown : `${shown}:${port}`;
  return {
    url: `http://${origin}/${token ? `?token=${encodeURIComponent(token)}` : ''}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The request body as text, or undefined past {@link MAX_BODY_BYTES}. */
async function readBody(req: http.IncomingMessage): Promise<string | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) return undefined;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}
