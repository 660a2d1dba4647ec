/**
 * Holding a Node `ServerResponse` until its outcome is recorded: what any framework writes
 * (NestJS on Express writes through `res.end`, on Fastify through `res.writeHead` and
 * `res.end`) is buffered, and at `end` the web Response built from it is handed to a
 * decision function whose result is what the client gets. Same shape as the Express adapter's
 * capture, on the raw response so it serves both of NestJS's platforms.
 */
import type { ServerResponse } from 'node:http';
import { toHeaders } from '../http/node/headers.js';
import { holdWrites, restoreMethods, saveMethods } from '../http/node/hold.js';
import { bodyResponse } from '../http/response.js';

/**
 * Buffers what is written to `res`; at `end`, sends `decide(written)` instead.
 *
 * @param decide gets the response as written (status, headers, exact body bytes) and returns
 *   the one to send (the same after it is recorded, a replay, or one of idem's problems)
 * @param crash when given, a `res.destroy(error)` before `end` sends `crash(error)` instead
 */
export function holdResponse(res: ServerResponse, decide: (written: Response) => Promise<Response>, crash?: (error: unknown) => Promise<Response>): void {
  const original = saveMethods(res);
  const restore = () => restoreMethods(res);
  const held = holdWrites(res);
  if (crash) {
    // `pipeline(stream, res)` destroys the held response with the stream's error: the handler
    // crashed mid-body. Answer `crash(error)` instead of a reset over a key left in progress
    // (protocol.md H23). A destroy without an error, or of a connection already gone, is Node's.
    res.destroy = function destroy(error?: Error) {
      if (!error || res.socket?.destroyed !== false) return original.destroy.call(res, error);
      restore();
      crash(error)
        .then((out) => sendResponse(res, out))
        .catch(() => void (res.writableEnded || original.destroy.call(res)));
      return res;
    } as ServerResponse['destroy'];
  }
  res.end = function end(chunk?: unknown, encoding?: unknown, cb?: unknown) {
    held.push(chunk, encoding);
    restore();
    const written = bodyResponse(res.statusCode, held.body(), { headers: toHeaders(res.getHeaders()) });
    decide(written)
      .then(
        (out) => sendResponse(res, out),
        (error: unknown) => sendResponse(res, new Response(String(error), { status: 500 })),
      )
      // The client went away or the head went out past the hold: never leave it hanging.
      .catch(() => void (res.writableEnded || res.destroy()))
      .finally(() => {
        const callback = [chunk, encoding, cb].find((arg) => typeof arg === 'function');
        if (callback) (callback as () => void)();
      });
    return res;
  } as ServerResponse['end'];
}

/** Writes a web Response out through Node's response, replacing any headers set so far. */
export async function sendResponse(res: ServerResponse, response: Response): Promise<void> {
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  res.statusCode = response.status;
  const cookies = response.headers.getSetCookie();
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie') res.setHeader(name, value);
  });
  if (cookies.length > 0) res.setHeader('set-cookie', cookies);
  const body = response.body ? Buffer.from(await response.arrayBuffer()) : undefined;
  if (body !== undefined) res.setHeader('content-length', body.length);
  res.end(body);
}
