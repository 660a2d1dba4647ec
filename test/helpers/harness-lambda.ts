/**
 * Adapter contract harnesses for idem/lambda: a fetch Request is turned into the event API
 * Gateway (REST API 1.0, HTTP API 2.0) or a Lambda function URL would deliver (starting from
 * the AWS documentation's example events in test/fixtures/lambda/), the wrapped handler is
 * called with a Lambda-like context, and its result is turned back into the HTTP response
 * API Gateway would send. `serve()` puts the same translation behind a node:http bridge, for
 * the tests that need a socket. As on Lambda, a client that disconnects does not stop the
 * invocation (the bridge never cancels it).
 */
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { withIdempotency, type ApiGatewayProxyEventV1, type ApiGatewayProxyEventV2, type LambdaHttpEvent } from '../../src/lambda/index.js';
import type { Queryable } from '../../src/postgres/client.js';
import { type AdapterHarness, listen, toResponse } from './adapter-harness.js';

export type EventFormat = 'rest v1' | 'http v2' | 'function url';

const FIXTURES: Record<EventFormat, string> = { 'rest v1': 'rest-v1.json', 'http v2': 'http-v2.json', 'function url': 'function-url.json' };

/** A fixture event from test/fixtures/lambda/ (a fresh copy each call). */
export function fixture<T = LambdaHttpEvent>(format: EventFormat): T {
  return JSON.parse(readFileSync(new URL(`../fixtures/lambda/${FIXTURES[format]}`, import.meta.url), 'utf8')) as T;
}

/** A Lambda context whose invocation ends `timeoutMs` after it was made. */
export function lambdaContext(timeoutMs = 30_000) {
  const deadline = performance.now() + timeoutMs;
  return {
    functionName: 'idem-test',
    awsRequestId: randomUUID(),
    callbackWaitsForEmptyEventLoop: true,
    getRemainingTimeInMillis: () => Math.max(0, Math.floor(deadline - performance.now())),
  };
}

const TEXT = /^(text\/|application\/(json|[\w.+-]*\+json|xml|x-www-form-urlencoded))/i;

/** Body bytes as API Gateway hands them: text, or base64 for binary media types (and anything not UTF-8). */
function encodeBody(bytes: Uint8Array, contentType: string | null): { body: string; isBase64Encoded: boolean } {
  const buffer = Buffer.from(bytes);
  const text = buffer.toString('utf8');
  if (TEXT.test(contentType ?? '') && Buffer.from(text, 'utf8').equals(buffer)) return { body: text, isBase64Encoded: false };
  return { body: buffer.toString('base64'), isBase64Encoded: true };
}

/** The event API Gateway / a function URL would deliver for `request`. */
export async function toEvent(format: EventFormat, request: Request): Promise<LambdaHttpEvent> {
  const url = new URL(request.url);
  const bytes = new Uint8Array(await request.arrayBuffer());
  const encoded = bytes.length > 0 ? encodeBody(bytes, request.headers.get('content-type')) : { body: undefined, isBase64Encoded: false };
  if (format === 'rest v1') {
    const event = fixture<ApiGatewayProxyEventV1 & Record<string, unknown>>(format);
    const headers: Record<string, string> = {};
    const multi: Record<string, string[]> = {};
    request.headers.forEach((value, name) => {
      headers[name] = value;
      multi[name] = [value];
    });
    const query: Record<string, string[]> = {};
    for (const [name, value] of url.searchParams) {
      query[name] ??= [];
      query[name].push(value);
    }
    Object.assign(event, {
      httpMethod: request.method,
      path: url.pathname,
      headers,
      multiValueHeaders: multi,
      queryStringParameters: url.search ? Object.fromEntries(Object.entries(query).map(([n, v]) => [n, v.at(-1)])) : null,
      multiValueQueryStringParameters: url.search ? query : null,
      body: encoded.body ?? null,
      isBase64Encoded: encoded.isBase64Encoded,
    });
    (event.requestContext as Record<string, unknown>).httpMethod = request.method;
    return event;
  }
  const event = fixture<ApiGatewayProxyEventV2 & Record<string, unknown>>(format);
  const headers: Record<string, string> = {};
  request.headers.forEach((value, name) => {
    if (name !== 'cookie') headers[name] = value;
  });
  const cookie = request.headers.get('cookie');
  Object.assign(event, {
    rawPath: url.pathname,
    rawQueryString: url.search.slice(1),
    headers,
    cookies: cookie ? cookie.split(/;\s*/) : undefined,
    queryStringParameters: url.search ? Object.fromEntries(url.searchParams) : undefined,
    body: encoded.body,
    isBase64Encoded: encoded.isBase64Encoded,
  });
  if (!cookie) delete event.cookies;
  if (encoded.body === undefined) delete event.body;
  event.requestContext.http = { ...event.requestContext.http, method: request.method, path: url.pathname } as { method: string };
  return event;
}

interface AnyResult {
  statusCode?: number;
  headers?: Record<string, string | number | boolean>;
  multiValueHeaders?: Record<string, Array<string | number | boolean>>;
  cookies?: string[];
  body?: string;
  isBase64Encoded?: boolean;
}

/** The HTTP response API Gateway sends for a handler's result. */
export function fromResult(result: unknown): Response {
  const r = result as AnyResult;
  const headers = new Headers();
  for (const [name, value] of Object.entries(r.headers ?? {})) headers.set(name, String(value));
  for (const [name, values] of Object.entries(r.multiValueHeaders ?? {})) for (const v of values) headers.append(name, String(v));
  for (const cookie of r.cookies ?? []) headers.append('set-cookie', cookie);
  const status = r.statusCode ?? 200;
  const body = r.body ? Buffer.from(r.body, r.isBase64Encoded ? 'base64' : 'utf8') : null;
  return new Response([204, 304].includes(status) ? null : body, { status, headers });
}

/** A route's reply as the handler's result: binary bodies base64-encoded, cookies in the format's own field. */
async function toResult(format: EventFormat, reply: Response): Promise<AnyResult> {
  const bytes = new Uint8Array(await reply.arrayBuffer());
  const { body, isBase64Encoded } = encodeBody(bytes, reply.headers.get('content-type'));
  const headers: Record<string, string> = {};
  reply.headers.forEach((value, name) => {
    if (name !== 'set-cookie') headers[name] = value;
  });
  const cookies = reply.headers.getSetCookie();
  const result: AnyResult = { statusCode: reply.status, headers, body, isBase64Encoded };
  if (cookies.length > 0) {
    if (format === 'rest v1') result.multiValueHeaders = { 'set-cookie': cookies };
    else result.cookies = cookies;
  }
  return result;
}

function harness(format: EventFormat): AdapterHarness {
  return {
    name: `lambda ${format}`,
    socket: false,
    build(options, route, cleanup) {
      const handler = withIdempotency<Queryable>(options, async (event, _context, idem) => {
        const request = eventAsRequest(event);
        return toResult(format, toResponse(await route(request, idem)));
      });
      const invoke = async (request: Request) => fromResult(await handler(await toEvent(format, request), lambdaContext()));
      let url: Promise<string> | undefined;
      return {
        send: (path, init) => invoke(new Request('https://api.test' + path, init)),
        serve: () =>
          (url ??= listen(http.createServer((req, res) => void bridge(invoke, req, res))).then((server) => {
            cleanup(server.close);
            return server.url;
          })),
      };
    },
  };
}

/** What the route sees: the event's method, path, headers and (decoded) body. */
function eventAsRequest(event: LambdaHttpEvent) {
  const v2 = 'rawPath' in event;
  const headers = new Headers();
  if (v2) {
    for (const [n, v] of Object.entries(event.headers ?? {})) if (v !== undefined) headers.set(n, v);
    if (event.cookies) headers.set('cookie', event.cookies.join('; '));
  } else for (const [n, vs] of Object.entries(event.multiValueHeaders ?? {})) for (const v of vs ?? []) headers.append(n, v);
  const bytes = async () => (event.body ? new Uint8Array(Buffer.from(event.body, event.isBase64Encoded ? 'base64' : 'utf8')) : new Uint8Array());
  const query = v2 ? (event.rawQueryString ? `?${event.rawQueryString}` : '') : '';
  return {
    method: v2 ? event.requestContext.http.method : event.httpMethod,
    path: (v2 ? event.rawPath : event.path) + query,
    headers,
    bytes,
    text: async () => Buffer.from(await bytes()).toString('utf8'),
    json: async <T>() => JSON.parse(Buffer.from(await bytes()).toString('utf8')) as T,
  };
}

/** Serves one node:http request through `invoke`, as API Gateway would. */
async function bridge(invoke: (request: Request) => Promise<Response>, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  try {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const headers = new Headers();
    for (const [name, values] of Object.entries(req.headersDistinct)) for (const v of values ?? []) headers.append(name, v);
    const body = chunks.length > 0 ? Buffer.concat(chunks) : null;
    const response = await invoke(new Request(`https://api.test${req.url}`, { method: req.method, headers, body }));
    const out = Buffer.from(await response.arrayBuffer());
    res.statusCode = response.status;
    response.headers.forEach((value, name) => {
      if (name !== 'set-cookie') res.setHeader(name, value);
    });
    if (response.headers.getSetCookie().length > 0) res.setHeader('set-cookie', response.headers.getSetCookie());
    res.end(out);
  } catch (error) {
    if (!res.headersSent) res.statusCode = 502;
    res.end(String(error));
  }
}

export const lambdaRestV1 = harness('rest v1');
export const lambdaHttpV2 = harness('http v2');
export const lambdaFunctionUrl = harness('function url');
export const lambdaHarnesses: AdapterHarness[] = [lambdaRestV1, lambdaHttpV2, lambdaFunctionUrl];
