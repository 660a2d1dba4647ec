/**
 * `idem dashboard`: a read-only page over the key table, served by node:http on loopback. The
 * page (`dashboard-page.ts`) fetches `/api/overview` and `/api/inspect`; both answer JSON from
 * `PostgresStore.dashboard` and `dashboardInspect` (no bodies, no credentials, no phase results).
 * On a non-loopback host a token is required, sent as `Authorization: Bearer <token>` or
 * `?token=` (the page passes on the one in its own URL).
 */
import { timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { PostgresStore } from '../postgres/index.js';
import { DASHBOARD_PAGE } from './dashboard-page.js';

/** Options of {@link startDashboard}. */
export interface DashboardOptions {
  store: PostgresStore;
  /** @default '127.0.0.1' */
  host?: string;
  /** 0: any free port. @default 7117 */
  port?: number;
  /** Required unless `host` is a loopback address. */
  token?: string;
  /** Rows older than this are past retention, in ms. @default 86_400_000 */
  retentionMs?: number;
}

/** A running dashboard. */
export interface Dashboard {
  /** The page's URL (with `?token=` when a token is set). */
  url: string;
  close(): Promise<void>;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/**
 * Serves the dashboard until `close()`.
 * @throws {Error} for a non-loopback host without a token, or when the port is taken
 */
export async function startDashboard(options: DashboardOptions): Promise<Dashboard> {
  const host = options.host ?? '127.0.0.1';
  const token = options.token;
  if (!LOOPBACK.has(host) && !token)
    throw new Error(`--host ${host} is not a loopback address: set --token (or IDEM_DASHBOARD_TOKEN) so the page is not open to anyone`);
  const retentionMs = options.retentionMs ?? 86_400_000;
  const store = options.store;

  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://dashboard');
    const send = (status: number, type: string, body: string) => {
      res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff', 'referrer-policy': 'no-referrer' });
      res.end(body);
    };
    if (req.method !== 'GET') return send(405, 'text/plain', 'read-only\n');
    if (token && !authorized(req, url, token)) return send(401, 'text/plain', 'token required\n');
    try {
      if (url.pathname === '/') return send(200, 'text/html; charset=utf-8', DASHBOARD_PAGE);
      if (url.pathname === '/api/overview') return send(200, 'application/json', JSON.stringify(await store.dashboard(retentionMs)));
      if (url.pathname === '/api/inspect') {
        const scope = url.searchParams.get('scope') ?? '';
        const key = url.searchParams.get('key') ?? '';
        if (!scope || !key) return send(400, 'application/json', JSON.stringify({ error: 'scope and key are required' }));
        const found = await store.dashboardInspect(scope, key, retentionMs);
        return found ? send(200, 'application/json', JSON.stringify(found)) : send(404, 'application/json', JSON.stringify({ error: 'no such key' }));
      }
      return send(404, 'text/plain', 'not found\n');
    } catch (error) {
      return send(503, 'application/json', JSON.stringify({ error: `database: ${(error as Error)?.message ?? error}` }));
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 7117, host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const shown = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${shown}:${port}/${token ? `?token=${encodeURIComponent(token)}` : ''}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function authorized(req: http.IncomingMessage, url: URL, token: string): boolean {
  const header = req.headers.authorization;
  const given = header?.startsWith('Bearer ') ? header.slice(7) : (url.searchParams.get('token') ?? '');
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}
