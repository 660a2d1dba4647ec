/**
 * AWS Lambda HTTP events and results as web-standard requests and responses: API Gateway REST
 * APIs (proxy integration, payload format 1.0), HTTP APIs (payload format 2.0) and Lambda
 * function URLs (the 2.0 shape). Only the fields idem reads are declared; the events are
 * otherwise passed to the handler untouched.
 */
import type { HttpRequestInput } from '../http/idempotency.js';

/** An API Gateway REST API proxy event (payload format 1.0). */
export interface ApiGatewayProxyEventV1 {
  httpMethod: string;
  /** The resource path, without the stage, e.g. `/v1/charges`. */
  path: string;
  headers?: Record<string, string | undefined> | null;
  /** Every header line, repeated names kept apart. */
  multiValueHeaders?: Record<string, string[] | undefined> | null;
  queryStringParameters?: Record<string, string | undefined> | null;
  multiValueQueryStringParameters?: Record<string, string[] | undefined> | null;
  body?: string | null;
  /** True when `body` is base64 (a binary media type). */
  isBase64Encoded?: boolean;
  requestContext?: unknown;
}

/** An HTTP API event (payload format 2.0), also the shape of a Lambda function URL event. */
export interface ApiGatewayProxyEventV2 {
  version: '2.0' | string;
  rawPath: string;
  /** The query as sent, without `?`. */
  rawQueryString?: string;
  /** Lower-case names; repeated lines joined with commas. */
  headers?: Record<string, string | undefined>;
  /** The Cookie header's cookies (API Gateway takes it out of `headers`). */
  cookies?: string[];
  body?: string;
  isBase64Encoded?: boolean;
  /** Only `http.method` is read; no index signature, so the aws-lambda event types fit this slice. */
  requestContext: { http: { method: string } };
}

/** Any HTTP event the adapter understands. */
export type LambdaHttpEvent = ApiGatewayProxyEventV1 | ApiGatewayProxyEventV2;

/** A REST API proxy result (1.0). */
export interface ApiGatewayProxyResultV1 {
  statusCode: number;
  headers?: Record<string, string | number | boolean>;
  multiValueHeaders?: Record<string, Array<string | number | boolean>>;
  body?: string;
  isBase64Encoded?: boolean;
}

/** An HTTP API / function URL result (2.0). */
export interface ApiGatewayProxyStructuredResultV2 {
  statusCode?: number;
  headers?: Record<string, string | number | boolean>;
  /** Set-Cookie lines, one per cookie. */
  cookies?: string[];
  body?: string;
  isBase64Encoded?: boolean;
}

/**
 * What a 2.0 handler may return: a structured result, or any other JSON value, which API
 * Gateway sends as a 200 `application/json` body.
 */
export type ApiGatewayProxyResultV2 = ApiGatewayProxyStructuredResultV2 | string | number | boolean | null | object;

/** Either result. */
export type LambdaHttpResult = ApiGatewayProxyResultV1 | ApiGatewayProxyResultV2;

/** True for a 2.0 event (HTTP API or function URL). */
export function isV2(event: LambdaHttpEvent): event is ApiGatewayProxyEventV2 {
  return (event as ApiGatewayProxyEventV2).version === '2.0' || typeof (event as ApiGatewayProxyEventV2).requestContext?.http?.method === 'string';
}

/** True when `event` looks like an HTTP event of either format. */
export function isHttpEvent(event: unknown): event is LambdaHttpEvent {
  if (typeof event !== 'object' || event === null) return false;
  return typeof (event as ApiGatewayProxyEventV1).httpMethod === 'string' || typeof (event as ApiGatewayProxyEventV2).rawPath === 'string';
}

/** The event as the HTTP core sees it (body bytes decoded from base64 when flagged). */
export function eventRequest(event: LambdaHttpEvent, keyHeader: string): HttpRequestInput {
  const body = event.body === undefined || event.body === null || event.body === '' ? null : Buffer.from(event.body, event.isBase64Encoded ? 'base64' : 'utf8');
  const headers = new Headers();
  if (isV2(event)) {
    for (const [name, value] of Object.entries(event.headers ?? {})) if (value !== undefined) headers.set(name, value);
    if (event.cookies && event.cookies.length > 0) headers.set('cookie', event.cookies.join('; '));
    const query = event.rawQueryString ? `?${event.rawQueryString}` : '';
    return { method: event.requestContext.http.method, url: `https://${host(headers)}${event.rawPath}${query}`, headers, body };
  }
  let keyHeaderLines: string[] | undefined;
  if (event.multiValueHeaders) {
    for (const [name, values] of Object.entries(event.multiValueHeaders)) {
      for (const value of values ?? []) headers.append(name, value);
      if (name.toLowerCase() === keyHeader.toLowerCase()) keyHeaderLines = [...(keyHeaderLines ?? []), ...(values ?? [])];
    }
  } else {
    for (const [name, value] of Object.entries(event.headers ?? {})) if (value !== undefined) headers.set(name, value);
  }
  // API Gateway 1.0 hands the query decoded: encode it again, every value kept.
  const query = new URLSearchParams();
  if (event.multiValueQueryStringParameters) {
    for (const [name, values] of Object.entries(event.multiValueQueryStringParameters)) for (const v of values ?? []) query.append(name, v);
  } else {
    for (const [name, value] of Object.entries(event.queryStringParameters ?? {})) if (value !== undefined) query.append(name, value);
  }
  const search = query.size > 0 ? `?${query}` : '';
  return { method: event.httpMethod, url: `https://${host(headers)}${event.path}${search}`, headers, body, keyHeaderLines };
}

function host(headers: Headers): string {
  const value = headers.get('host') ?? '';
  return /^[A-Za-z0-9.:[\]-]+$/.test(value) ? value : 'lambda.invalid';
}

/** The handler's result as a web Response, read the way API Gateway reads it for `event`'s format. */
export function resultResponse(result: unknown, v2: boolean): Response {
  if (v2 && !isStructured(result)) {
    // 2.0 without a statusCode: API Gateway sends the value as a 200 JSON body.
    return new Response(result === undefined ? '' : JSON.stringify(result), { status: 200, headers: { 'content-type': 'application/json' } });
  }
  const r = (result ?? {}) as ApiGatewayProxyResultV1 & ApiGatewayProxyStructuredResultV2;
  if (typeof r.statusCode !== 'number') throw new TypeError('idem/lambda: the handler returned a result without a numeric statusCode');
  const headers = new Headers();
  for (const [name, value] of Object.entries(r.headers ?? {})) headers.set(name, String(value));
  for (const [name, values] of Object.entries(r.multiValueHeaders ?? {})) {
    if (headers.has(name) && name.toLowerCase() !== 'set-cookie') headers.delete(name); // multiValueHeaders wins
    for (const value of values) headers.append(name, String(value));
  }
  for (const cookie of r.cookies ?? []) headers.append('set-cookie', cookie);
  const body = r.body === undefined || r.body === null ? new Uint8Array() : Buffer.from(r.body, r.isBase64Encoded ? 'base64' : 'utf8');
  return new Response(NULL_BODY.has(r.statusCode) ? null : body, { status: r.statusCode, headers });
}

const NULL_BODY = new Set([101, 103, 204, 205, 304]);

function isStructured(result: unknown): result is ApiGatewayProxyStructuredResultV2 {
  return typeof result === 'object' && result !== null && typeof (result as { statusCode?: unknown }).statusCode === 'number';
}

/**
 * A web Response as a result in `event`'s format. The body is text when its media type is
 * textual (or absent) and its bytes are valid UTF-8, else base64 with `isBase64Encoded: true` (for a
 * REST API, list the media type in the API's binary media types).
 */
export async function responseResult(response: Response, v2: boolean): Promise<ApiGatewayProxyResultV1 & ApiGatewayProxyStructuredResultV2> {
  const bytes = new Uint8Array(await response.arrayBuffer());
  const text = textBody(bytes, response.headers.get('content-type'));
  const headers: Record<string, string> = {};
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie') headers[name] = value;
  });
  const cookies = response.headers.getSetCookie();
  const result: ApiGatewayProxyResultV1 & ApiGatewayProxyStructuredResultV2 = {
    statusCode: response.status,
    headers,
    body: text ?? Buffer.from(bytes).toString('base64'),
    isBase64Encoded: text === undefined,
  };
  if (cookies.length > 0) {
    if (v2) result.cookies = cookies;
    else result.multiValueHeaders = { 'set-cookie': cookies };
  }
  return result;
}

const TEXT_TYPE = /^(text\/|application\/([\w.+-]*\+)?(json|xml)\b|application\/(javascript|x-www-form-urlencoded)\b)/i;
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function textBody(bytes: Uint8Array, contentType: string | null): string | undefined {
  if (bytes.length === 0) return '';
  if (contentType && !TEXT_TYPE.test(contentType)) return undefined;
  try {
    return utf8.decode(bytes);
  } catch {
    return undefined;
  }
}
