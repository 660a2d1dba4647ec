import { DEFAULT_REPLAY_HEADERS, NEVER_REPLAYED_HEADERS, REPLAYED_HEADER } from '../core/constants.js';
import { OPERATION_STATE_HEADER, OperationState } from '../core/next-step.js';

const OPERATION_STATE = OPERATION_STATE_HEADER.toLowerCase();
import type { StoredResponse } from '../store/types.js';

/** Statuses whose responses have no body (RFC 9110 §6.4.1, §15.3.5, §15.4.5). */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/**
 * A web Response from a status and body bytes, with `null` for statuses that must not carry
 * a body (the Response constructor throws on a body there, even an empty one).
 */
export function bodyResponse(status: number, body: Uint8Array, init: ResponseInit = {}): Response {
  return new Response(NULL_BODY.has(status) ? null : body, { ...init, status });
}

/** The replay headers built per stored response: a replay cache hands out the same object every hit (protocol.md K20). */
const builtReplayHeaders = new WeakMap<StoredResponse, Record<string, string>>();

/**
 * Builds the normalised list of response headers to store: lower-case names on the
 * allow-list, never any of {@link NEVER_REPLAYED_HEADERS} (Set-Cookie, Authorization, …).
 */
export function replayHeaderFilter(allow: readonly string[] = DEFAULT_REPLAY_HEADERS): (name: string) => boolean {
  const never = new Set<string>(NEVER_REPLAYED_HEADERS);
  const allowed = new Set(allow.map((h) => h.toLowerCase()).filter((h) => !never.has(h)));
  // A stored problem keeps its next step (protocol.md H41), whatever the allow-list says.
  allowed.add(OPERATION_STATE);
  return (name) => allowed.has(name.toLowerCase());
}

/**
 * Reads a response once: its exact body bytes and the headers to store.
 *
 * @param maxBytes the most body bytes buffered to store (`maxResponseBytes`); past it the rest
 *   is streamed to this client and `tooLarge()` is stored instead. @default Infinity
 * @param tooLarge the stored form of a response too large to keep
 * @returns the stored form, and a copy of the response (status, all headers, same bytes)
 *   to send to this client, since the original's body stream is consumed.
 * @throws whatever the body stream throws (a handler's stream that errors mid-way)
 */
export async function captureResponse(
  response: Response,
  keepHeader: (name: string) => boolean,
  maxBytes = Infinity,
  tooLarge?: () => StoredResponse,
): Promise<{ stored: StoredResponse; response: Response }> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = response.body?.getReader();
  if (reader) {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.length;
      if (size > maxBytes && tooLarge) {
        // Too large to keep: this client still gets every byte, streamed from what was read
        // and the rest of the handler's stream; the key stores a problem instead.
        const rest = new ReadableStream<Uint8Array>({
          start(controller) {
            for (const chunk of chunks) controller.enqueue(chunk);
            chunks.length = 0;
          },
          async pull(controller) {
            const next = await reader.read();
            if (next.done) controller.close();
            else controller.enqueue(next.value);
          },
          cancel: (reason) => reader.cancel(reason),
        });
        const sent = new Response(rest, { status: response.status, statusText: response.statusText, headers: response.headers });
        return { stored: tooLarge(), response: sent };
      }
    }
  }
  const body = concat(chunks, size);
  const headers: Array<[string, string]> = [];
  response.headers.forEach((value, name) => {
    if (keepHeader(name)) headers.push([name.toLowerCase(), value]);
  });
  const copy = bodyResponse(response.status, body, { statusText: response.statusText, headers: response.headers });
  return { stored: { status: response.status, headers, body }, response: copy };
}

/**
 * The headers to store from a held response's headers (Node's `getHeaders()` form: lower-case
 * names, a repeated header as an array), the same list {@link captureResponse} keeps from the
 * web Response built of them: kept names only, in name order. `undefined` when a web Response
 * would not carry them unchanged (a repeated header other than Set-Cookie, which it joins; a
 * value with surrounding whitespace, which it trims): the caller then builds that Response.
 */
export function storedHeaders(
  headers: Readonly<Record<string, string | number | readonly string[] | undefined>>,
  keepHeader: (name: string) => boolean,
): Array<[string, string]> | undefined {
  const kept: Array<[string, string]> = [];
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined) continue;
    if (typeof value === 'object') {
      if (name !== 'set-cookie') return undefined;
      for (const v of value) if (!trimmed(v)) return undefined;
      continue;
    }
    const text = typeof value === 'string' ? value : String(value);
    if (!trimmed(text)) return undefined;
    if (keepHeader(name)) kept.push([name, text]);
  }
  if (kept.length > 1) kept.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return kept;
}

/** True when `value` has no leading or trailing HTTP whitespace (what Headers strips). */
function trimmed(value: string): boolean {
  if (value.length === 0) return true;
  const first = value.charCodeAt(0);
  const last = value.charCodeAt(value.length - 1);
  return !(first === 32 || first === 9 || first === 10 || first === 13 || last === 32 || last === 9 || last === 10 || last === 13);
}

/** The chunks of a stream read to its end, as one array of `size` bytes. */
export function concat(chunks: Uint8Array[], size: number): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(size);
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.length;
  }
  return out;
}

/** Reads a response once into its stored form and a copy to send. */
export type ResponseCapture = (response: Response) => Promise<{ stored: StoredResponse; response: Response }>;

/**
 * The headers of a replayed response: the stored ones, `Idempotent-Replayed: true` and the next
 * step (`Idem-Operation-State`, `completed` unless the stored response says otherwise), as a
 * plain record with lower-case names. A repeated name is joined with ", ", which is what
 * Headers.append gives (Set-Cookie, the one header that cannot be joined, is never stored).
 */
export function replayHeaders(stored: StoredResponse): Record<string, string> {
  // A plain object (a prototype-less one is a slow dictionary for every reader of it); a name
  // such as `constructor` is an own key like any other, and `__proto__` is defined, not set.
  const headers: Record<string, string> = {};
  for (const [name, value] of stored.headers) {
    const key = name.toLowerCase();
    const joined = Object.hasOwn(headers, key) ? `${headers[key]}, ${value}` : value;
    if (key === '__proto__') Object.defineProperty(headers, key, { value: joined, enumerable: true, writable: true, configurable: true });
    else headers[key] = joined;
  }
  headers[REPLAYED_HEADER.toLowerCase()] = 'true';
  // A replay is the key's answer (protocol.md H41); a stored problem says its own next step.
  if (!Object.hasOwn(headers, OPERATION_STATE)) headers[OPERATION_STATE] = OperationState.Completed;
  return headers;
}

/**
 * {@link replayHeaders}, built once per stored response object (lower-cased, joined) and kept
 * read-only; each replay gets its own shallow copy of it, because a server's lighter Response
 * (@hono/node-server 1.x and 2.0) keeps the record it is given and adds Content-Length to it.
 */
function sharedReplayHeaders(stored: StoredResponse): Record<string, string> {
  let headers = builtReplayHeaders.get(stored);
  if (headers === undefined) {
    headers = Object.freeze(replayHeaders(stored));
    builtReplayHeaders.set(stored, headers);
  }
  return headers;
}

/** True when a response with this status carries no body (RFC 9110). */
export function isNullBodyStatus(status: number): boolean {
  return NULL_BODY.has(status);
}

/**
 * A stored response as sent to a retry: same status, same bytes, stored headers and
 * `Idempotent-Replayed: true`. The headers are a plain record, not a Headers object: servers
 * that bridge web Responses to Node's (@hono/node-server) write a record directly, where a
 * Headers object is validated and copied again.
 */
export function replayResponse(stored: StoredResponse): Response {
  return replayOf(stored, replayHeaders(stored));
}

/** {@link replayResponse} for a record the replay cache handed out (protocol.md K20): its headers are built once, and each replay gets a copy. */
export function cachedReplayResponse(stored: StoredResponse): Response {
  return replayOf(stored, { ...sharedReplayHeaders(stored) });
}

/** The replay's Response: no init spread, no Headers object (see {@link replayResponse}). */
function replayOf(stored: StoredResponse, headers: Record<string, string>): Response {
  const status = stored.status;
  return new Response(NULL_BODY.has(status) ? null : stored.body, { status, headers });
}
