/**
 * Holding a Node `ServerResponse` while idem records it, shared by the adapters that run on
 * Node's response (Express, NestJS on either platform): `writeHead` keeps status and headers on
 * the response instead of sending the head, and `write` buffers the body bytes. The adapter
 * overrides `end` itself (what happens to the held response differs), pushing its last chunk
 * through {@link HeldWrites.push} and reading the bytes with {@link HeldWrites.body}.
 */
import type { IncomingHttpHeaders, OutgoingHttpHeaders, ServerResponse } from 'node:http';

/** The writes of one held response. */
export interface HeldWrites {
  /** Buffers a chunk as `write`/`end` received it (a string in its encoding, or bytes). */
  push(chunk: unknown, encoding?: unknown): void;
  /** Every byte written so far. */
  body(): Buffer;
}

/**
 * Replaces `res.writeHead` and `res.write` so nothing reaches the socket; the caller saved the
 * originals and restores them before sending.
 */
export function holdWrites(res: ServerResponse): HeldWrites {
  // writeHead (also reached through flushHeaders) would commit the head before the response
  // is recorded: keep its status and headers on `res` instead, as setHeader would.
  res.writeHead = function writeHead(statusCode: number, ...rest: unknown[]) {
    res.statusCode = statusCode;
    const headers = rest.find((arg) => typeof arg === 'object' && arg !== null);
    if (Array.isArray(headers)) {
      for (let i = 0; i + 1 < headers.length; i += 2) res.setHeader(String(headers[i]), headers[i + 1] as string);
    } else if (headers) {
      for (const [name, value] of Object.entries(headers)) if (value !== undefined) res.setHeader(name, value as string);
    }
    return res;
  } as ServerResponse['writeHead'];
  const chunks: Buffer[] = [];
  const push = (chunk: unknown, encoding?: unknown) => {
    if (chunk === undefined || chunk === null || typeof chunk === 'function') return;
    chunks.push(
      typeof chunk === 'string' ? Buffer.from(chunk, (typeof encoding === 'string' ? encoding : 'utf8') as BufferEncoding) : Buffer.from(chunk as Uint8Array),
    );
  };
  res.write = function write(chunk: unknown, encoding?: unknown, cb?: unknown) {
    push(chunk, encoding);
    const callback = typeof encoding === 'function' ? encoding : cb;
    if (typeof callback === 'function') queueMicrotask(() => (callback as () => void)());
    return true;
  } as ServerResponse['write'];
  // Every chunk was copied when pushed: one chunk is the body as it is.
  return { push, body: () => (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)) };
}

/** Node's header object (request or response; repeated names as arrays) as fetch `Headers`. */
export function toHeaders(
  source: IncomingHttpHeaders | OutgoingHttpHeaders | Readonly<Record<string, string | number | readonly string[] | undefined>>,
): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(source)) {
    if (Array.isArray(value)) for (const v of value) headers.append(name, v);
    else if (value !== undefined) headers.set(name, String(value));
  }
  return headers;
}
