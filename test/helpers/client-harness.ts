/**
 * What the idem/client suites need around the real example payments server: the server as a
 * child process on a fresh PGlite directory or a fresh PostgreSQL database, an HTTP proxy that
 * records every request (its Idempotency-Key) and can lose a response after the server
 * committed it (reset) or hold it forever (hang), and a scripted local HTTP server for the
 * retry rules that need exact statuses and headers.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnTs } from './process.js';
import pg from 'pg';

export { ROOT, childEnv, spawnTs, type Child } from './process.js';
export { sleep } from './wait.js';
export const rand = (bytes = 6) => randomBytes(bytes).toString('hex');

/** A running example payments server. */
export interface PaymentsServer {
  url: string;
  stop(): Promise<void>;
}

/** Starts `examples/payments/server.ts` on port 0 with `env` (IDEM_DATA_DIR or DATABASE_URL, PSP_LATENCY_MS ...). */
export async function startPaymentsServer(env: Record<string, string>): Promise<PaymentsServer> {
  const server = spawnTs('examples/payments/server.ts', { PORT: '0', HOST: '127.0.0.1', ...env });
  const match = await server.waitFor(/listening on (http:\/\/127\.0\.0\.1:\d+)/).catch(async (error: unknown) => {
    await server.kill();
    throw error;
  });
  return { url: match[1]!, stop: () => server.kill('SIGTERM') };
}

/** A fresh database for one test file: a PGlite directory or a PostgreSQL database, removed by `drop()`. */
export interface Backend {
  name: 'pglite' | 'postgres';
  /** The server environment pointing at a fresh database (PGlite: one directory per call). */
  create(): Promise<Record<string, string>>;
  drop(): Promise<void>;
}

export function backends(): Backend[] {
  const list: Backend[] = [];
  const dirs: string[] = [];
  list.push({
    name: 'pglite',
    async create() {
      const dir = mkdtempSync(join(tmpdir(), 'idem-client-'));
      dirs.push(dir);
      return { IDEM_DATA_DIR: dir };
    },
    async drop() {
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    },
  });
  const adminUrl = process.env.DATABASE_URL;
  if (adminUrl) {
    const names: string[] = [];
    const admin = async (sql: string) => {
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      try {
        await client.query(sql);
      } finally {
        await client.end();
      }
    };
    list.push({
      name: 'postgres',
      async create() {
        const name = `idem_client_${rand()}`;
        await admin(`CREATE DATABASE "${name}"`);
        names.push(name);
        const url = new URL(adminUrl);
        url.pathname = `/${name}`;
        return { DATABASE_URL: url.toString() };
      },
      async drop() {
        for (const name of names) await admin(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      },
    });
  }
  return list;
}

/** One request as the proxy saw it. */
export interface SeenRequest {
  method: string;
  path: string;
  key: string | undefined;
  body: Buffer;
  /** What the proxy did with the answer. */
  fate: 'pass' | 'reset' | 'hang';
  /** The upstream answer (also for a reset one: what the client never got). */
  status?: number;
  responseBody?: Buffer;
}

/**
 * An HTTP proxy in front of `upstream` that records every request. `fate(req, n)` (n = index of
 * the request) decides per request: `pass` forwards the answer, `reset` waits for the upstream's
 * complete answer (so the server committed) and then resets the client's connection, `hang`
 * forwards the request and never answers. `onRequest` runs before forwarding (e.g. to look at
 * the client's intent store at that moment). Requests other than `/v1/...` may also be served
 * by `serve` (a static page for the browser suite).
 */
export interface RecordingProxy {
  url: string;
  port: number;
  seen: SeenRequest[];
  close(): Promise<void>;
}

export async function startRecordingProxy(options: {
  upstream: string;
  fate?: (req: SeenRequest, n: number) => 'pass' | 'reset' | 'hang';
  onRequest?: (req: SeenRequest) => void | Promise<void>;
  serve?: (req: http.IncomingMessage, res: http.ServerResponse) => boolean;
}): Promise<RecordingProxy> {
  const seen: SeenRequest[] = [];
  const upstream = new URL(options.upstream);
  const hanging = new Set<http.ServerResponse>();
  const server = http.createServer(async (req, res) => {
    if (options.serve?.(req, res)) return;
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const key = req.headers['idempotency-key'];
    const entry: SeenRequest = {
      method: req.method ?? '',
      path: req.url ?? '',
      key: Array.isArray(key) ? key.join(',') : key,
      body: Buffer.concat(chunks),
      fate: 'pass',
    };
    entry.fate = options.fate?.(entry, seen.length) ?? 'pass';
    seen.push(entry);
    await options.onRequest?.(entry);
    const headers = { ...req.headers, host: upstream.host };
    const up = http.request({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers, agent: false }, (upRes) => {
      const body: Buffer[] = [];
      upRes.on('data', (c: Buffer) => body.push(c));
      upRes.on('end', () => {
        entry.status = upRes.statusCode;
        entry.responseBody = Buffer.concat(body);
        if (entry.fate === 'reset') return req.socket.resetAndDestroy();
        if (entry.fate === 'hang') return void hanging.add(res);
        const out = { ...upRes.headers };
        delete out['transfer-encoding'];
        delete out.connection;
        res.writeHead(upRes.statusCode ?? 502, { ...out, 'content-length': String(entry.responseBody.length) });
        res.end(entry.responseBody);
      });
    });
    up.on('error', () => req.socket.destroy());
    up.end(entry.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of hanging) res.socket?.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A local HTTP server answering from a script: one `{status, headers, body}` per request, the last repeated. */
export async function startScriptedServer(
  script: Array<{ status: number; headers?: Record<string, string> | (() => Record<string, string>); body?: string } | 'reset'>,
): Promise<{ url: string; seen: Array<{ at: number; key: string | undefined; body: Buffer }>; close(): Promise<void> }> {
  const seen: Array<{ at: number; key: string | undefined; body: Buffer }> = [];
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const key = req.headers['idempotency-key'];
    seen.push({ at: Date.now(), key: Array.isArray(key) ? key.join(',') : key, body: Buffer.concat(chunks) });
    const step = script[Math.min(seen.length - 1, script.length - 1)]!;
    if (step === 'reset') return req.socket.resetAndDestroy();
    res.writeHead(step.status, typeof step.headers === 'function' ? step.headers() : step.headers);
    res.end(step.body ?? '');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The PSP charges of one customer, from the server's `GET /v1/psp/charges`. */
export async function pspCharges(serverUrl: string, customer: string): Promise<Array<{ id: string; idempotency_key: string; customer: string }>> {
  const res = await fetch(`${serverUrl}/v1/psp/charges`);
  if (res.status !== 200) throw new Error(`GET /v1/psp/charges: ${res.status} ${await res.text()}`);
  const { data } = (await res.json()) as { data: Array<{ id: string; idempotency_key: string; customer: string }> };
  return data.filter((c) => c.customer === customer);
}
