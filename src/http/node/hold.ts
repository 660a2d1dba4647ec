/**
 * Holding a Node `ServerResponse` while idem records it, shared by the adapters that run on
 * Node's response (Express, NestJS on either platform): `writeHead` keeps status and headers on
 * the response instead of sending the head, and `write` buffers the body bytes. The adapter
 * overrides `end` itself (what happens to the held response differs), pushing its last chunk
 * through {@link HeldWrites.push} and reading the bytes with {@link HeldWrites.body}.
 */
import type { ServerResponse } from 'node:http';

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

type Writer = { write: ServerResponse['write']; end: ServerResponse['end']; writeHead: ServerResponse['writeHead']; destroy: ServerResponse['destroy'] };
const SAVED = Symbol('idem.original');
/** The methods a hold replaces on the response. */
const HELD_METHODS = ['write', 'end', 'writeHead', 'destroy'] as const;
/**
 * Which of {@link HELD_METHODS} the response carried as its own properties before the hold
 * (another middleware's wrapper, e.g. compression's): those are put back as they were, the
 * others deleted so the prototype's method shows again. Assigning the prototype's functions
 * back as own properties instead left every held response with four own function
 * properties, and cost Express about a fifth of idem's CPU per new key (bench/notes.md).
 */
type Saved = { original: Writer; own: number };

/** Saves the response's `write`, `end`, `writeHead` and `destroy` before a hold replaces them. @returns the originals */
export function saveMethods(res: ServerResponse): Writer {
  const original: Writer = { write: res.write, end: res.end, writeHead: res.writeHead, destroy: res.destroy };
  let own = 0;
  for (let i = 0; i < HELD_METHODS.length; i++) if (Object.hasOwn(res, HELD_METHODS[i]!)) own |= 1 << i;
  (res as unknown as Record<symbol, Saved>)[SAVED] = { original, own };
  return original;
}

/** Puts back what {@link saveMethods} saved (once; later calls do nothing). */
export function restoreMethods(res: ServerResponse): void {
  const saved = (res as unknown as Record<symbol, Saved | undefined>)[SAVED];
  if (!saved) return;
  const { original, own } = saved;
  const target = res as unknown as Record<string, unknown>;
  for (let i = 0; i < HELD_METHODS.length; i++) {
    const name = HELD_METHODS[i]!;
    if (own & (1 << i)) target[name] = original[name];
    else delete target[name];
  }
  (res as unknown as Record<symbol, unknown>)[SAVED] = undefined;
}
