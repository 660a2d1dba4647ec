/**
 * `createGateway`: a reverse proxy that puts idem's protocol in front of a service in any
 * language (docs/guides/gateway.md). Each claimed request runs through the HTTP core
 * (`HttpIdempotency.prepare`, then `complete` with the upstream's response), and is forwarded
 * with the key, its scope, the fencing token and the attempt number; the failure table of
 * faults.ts decides what a fault does to the key (protocol.md K50).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { IdempotencyEngine } from '../engine/engine.js';
import type { Execution } from '../engine/execution.js';
import type { IdempotencyTelemetry } from '../engine/telemetry.js';
import { idemProblem, type ProblemFormat, ProblemKind, problemResponse } from '../http/problem.js';
import { keyHeaderLines, toHeaders } from '../http/node/headers.js';
import type { IdempotencyStore } from '../store/types.js';
import { type GatewayConfig, listenParts, parseGatewayConfig } from './config.js';
import { faultAnswer, principalMissing } from './faults.js';
import { type AttemptHeaders, upstreamRequestHeaders } from './headers.js';
import { PrincipalMissingError } from './principal.js';
import { buildRoutes, type GatewayRoute, matchRoute } from './routes.js';
import { Upstream } from './upstream.js';

/** Options of {@link createGateway}. */
export interface GatewayOptions {
  /** The configuration, as parsed from a file or written inline; validated here. */
  config: unknown;
  /** Where keys live (a `PostgresStore`, `RedisStore`, `MySqlStore`, `MemoryStore`, …). */
  store: IdempotencyStore;
  /** Format of the gateway's problem bodies. */
  problems?: ProblemFormat;
  /** Structured log lines (one JSON object each). @default none */
  log?: (entry: Record<string, unknown>) => void;
  /** Spans and metrics of every claim, as the library's (`openTelemetry()` from `idem/otel`). @default none */
  telemetry?: IdempotencyTelemetry;
}

/** A running gateway. */
export interface Gateway {
  readonly config: GatewayConfig;
  readonly server: Server;
  /** Starts listening on `config.listen`; resolves to the base URL (`http://host:port`). */
  listen(): Promise<string>;
  /** Stops accepting, drains in-flight requests (at most `drainMs`), then closes the upstream pool. */
  close(): Promise<void>;
}

/**
 * Creates the gateway (not yet listening).
 * @throws {GatewayConfigError} naming the bad field
 */
export function createGateway(options: GatewayOptions): Gateway {
  const config = parseGatewayConfig(options.config);
  const problems = options.problems ?? {};
  const log = options.log ?? (() => undefined);
  const engine = new IdempotencyEngine({ store: options.store, leaseMs: config.leaseMs, retentionMs: config.retentionMs, telemetry: options.telemetry });
  const routes = buildRoutes(config, engine, problems);
  const upstream = new Upstream(config.upstream, config.upstreamTimeoutMs, config.maxResponseBytes + 1);
  let inFlight = 0;
  let drained: (() => void) | undefined;

  const server = createServer({
    requestTimeout: config.requestTimeoutMs,
    headersTimeout: Math.min(config.requestTimeoutMs, 60_000),
    connectionsCheckingInterval: 250,
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    inFlight++;
    res.on('close', () => {
      if (--inFlight === 0) drained?.();
    });
    serve(req, res).catch((error: unknown) => {
      log({ level: 'error', msg: 'gateway request failed', error: String(error) });
      if (!res.headersSent) void send(res, problemResponse({ type: 'about:blank', title: 'Gateway error', status: 500 }, problems));
      else res.destroy();
    });
  });

  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? 'GET';
    const path = req.url ?? '/';
    const pathname = path.split('?')[0]!;
    if (method === 'GET' && pathname === '/healthz') return send(res, Response.json({ status: 'ok' }));
    if (method === 'GET' && pathname === '/readyz') return send(res, await readiness(options.store, config));
    const route = matchRoute(routes, method, pathname);
    if (!route) return proxy(req, res, method, path, req);
    const body = await readBody(req, route.maxBodyBytes);
    if (body === 'too-large') {
      res.shouldKeepAlive = false; // the rest of the body is never read
      const detail = `The request body is larger than ${route.maxBodyBytes} bytes; nothing was processed.`;
      return send(res, idemProblem(ProblemKind.RequestTooLarge, 413, detail, problems));
    }
    if (body === 'aborted') return;
    await claimed(req, res, route, method, path, body);
  }

  async function claimed(req: IncomingMessage, res: ServerResponse, route: GatewayRoute, method: string, path: string, body: Buffer | null): Promise<void> {
    let prepared: Awaited<ReturnType<GatewayRoute['core']['prepare']>>;
    try {
      const lines = keyHeaderLines(req, route.core.keyHeaderField);
      prepared = await route.core.prepare({ method, url: path, headers: toHeaders(req.headers), body, keyHeaderLines: lines });
    } catch (error) {
      if (error instanceof PrincipalMissingError) return send(res, principalMissing(error.detail, problems));
      // The principal could not be checked (the JWKS endpoint unreachable): nothing was claimed.
      log({ level: 'error', msg: 'principal not resolved', error: String(error) });
      return send(res, problemResponse({ type: 'about:blank', title: 'The principal could not be verified', status: 503 }, problems, { 'retry-after': '1' }));
    }
    if (prepared.kind === 'pass') return proxy(req, res, method, path, body);
    if (prepared.kind === 'respond') return send(res, prepared.response);
    const execution = prepared.context.execution;
    const attempt: AttemptHeaders = { scope: execution.scope, token: execution.token, attempt: (execution.failedAttempts ?? 0) + 1 };
    log({ level: 'info', msg: 'forwarding claimed request', scope: execution.scope, key: execution.key, token: attempt.token, attempt: attempt.attempt });
    const forwarded = await upstream.forward({ method, path, headers: headersFor(req, attempt), body });
    if (forwarded.kind === 'fault') {
      log({ level: 'warn', msg: 'upstream fault', fault: forwarded.fault.kind, key: execution.key, error: String(forwarded.fault.error) });
      return send(res, await faultAnswer(forwarded.fault, execution as Execution, config.leaseMs, problems));
    }
    return send(res, await prepared.complete(forwarded.response));
  }

  /** Forwards a request with no claim: no route, or no key where the route does not require one. */
  async function proxy(req: IncomingMessage, res: ServerResponse, method: string, path: string, body: IncomingMessage | Buffer | null) {
    const hasBody =
      body instanceof Buffer || (body !== null && (req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined));
    const forwarded = await upstream.forward({ method, path, headers: headersFor(req, undefined), body: hasBody ? body : null });
    if (forwarded.kind === 'fault') return send(res, await faultAnswer(forwarded.fault, undefined, config.leaseMs, problems));
    return send(res, forwarded.response);
  }

  function headersFor(req: IncomingMessage, attempt: AttemptHeaders | undefined) {
    const proto = (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http';
    return upstreamRequestHeaders(req.headers, { clientAddress: req.socket.remoteAddress, proto }, attempt);
  }

  return {
    config,
    server,
    async listen() {
      const { host, port } = listenParts(config.listen);
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve();
        });
      });
      const address = server.address() as AddressInfo;
      const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      return `http://${shown === '[::]' ? '127.0.0.1' : shown === '0.0.0.0' ? '127.0.0.1' : shown}:${address.port}`;
    },
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      if (inFlight > 0) {
        const done = new Promise<void>((resolve) => {
          drained = resolve;
        });
        let timer: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([done, new Promise<void>((resolve) => (timer = setTimeout(resolve, config.drainMs)))]);
        clearTimeout(timer);
      }
      server.closeAllConnections();
      await closed;
      await upstream.close();
    },
  };
}

/** Reads a request body, at most `limit` bytes (protocol.md H27): `too-large` past it, `aborted` when the client went away. */
async function readBody(req: IncomingMessage, limit: number): Promise<Buffer | null | 'too-large' | 'aborted'> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) return 'too-large';
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size > limit) return 'too-large';
      chunks.push(chunk as Buffer);
    }
  } catch {
    return 'aborted';
  }
  if (!req.complete) return 'aborted';
  return size === 0 ? null : Buffer.concat(chunks, size);
}

/** `/readyz`: 200 when the store answers a read, else 503. */
async function readiness(store: IdempotencyStore, config: GatewayConfig): Promise<Response> {
  try {
    await store.get('idem-gateway', 'readyz', config.retentionMs);
    return Response.json({ status: 'ready' });
  } catch (error) {
    return Response.json({ status: 'store-unavailable', detail: String((error as Error).message ?? error) }, { status: 503 });
  }
}

/** Writes a web Response to Node's response, streaming its body. */
async function send(res: ServerResponse, response: Response): Promise<void> {
  const headers: Record<string, string | string[]> = {};
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie') headers[name] = value;
  });
  const cookies = response.headers.getSetCookie();
  if (cookies.length > 0) headers['set-cookie'] = cookies;
  res.writeHead(response.status, headers);
  if (!response.body) {
    res.end();
    return;
  }
  try {
    for await (const chunk of response.body) {
      // A client that went away ends the loop (the body stream is cancelled with it), never a wait for a drain that cannot come.
      if (!res.write(chunk)) await new Promise<void>((resolve) => res.once('drain', resolve).once('close', resolve));
      if (res.destroyed) break;
    }
    res.end();
  } catch {
    res.destroy();
  }
}
