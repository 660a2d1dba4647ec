/**
 * One request to the upstream, through undici, and what a proxy can know of its end: a complete
 * response head (and its body read up to the capture limit), or a fault sorted by whether the
 * request may have reached the upstream (docs/guides/gateway.md "Failure table", protocol.md K50).
 */
import type { Readable } from 'node:stream';
import { Agent, request } from 'undici';
import { downstreamResponseHeaders } from './headers.js';

/** How a forward ended without a usable response. */
export type UpstreamFault =
  /** Nothing reached the upstream (connection refused, no route, DNS, connect timeout): safe to run again at once. */
  | { kind: 'unreachable'; timedOut: boolean; error: unknown }
  /** The upstream may have taken the request, then dropped or reset the connection before a complete response. */
  | { kind: 'dropped'; error: unknown }
  /** The upstream took the request and sent no response head (or stalled in the body) within the timeout. */
  | { kind: 'timeout'; error: unknown };

/** A forward's end: the upstream's response (headers filtered), or a fault. */
export type ForwardResult = { kind: 'response'; response: Response } | { kind: 'fault'; fault: UpstreamFault };

/** Error codes meaning no byte of the request can have reached the upstream. */
const UNREACHABLE = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL']);

/** Statuses whose responses have no body (RFC 9110). */
const NO_BODY = new Set([204, 205, 304]);

/** The upstream client: one undici Agent (keep-alive pool) for the gateway's life. */
export class Upstream {
  private readonly agent: Agent;

  /**
   * @param base the upstream's base URL; a request's path and query are appended to it
   * @param timeoutMs time for the response head, and between body chunks
   * @param captureBytes body bytes read before the response is handed on (the capture limit + 1)
   */
  constructor(
    private readonly base: string,
    timeoutMs: number,
    private readonly captureBytes: number,
  ) {
    this.agent = new Agent({ headersTimeout: timeoutMs, bodyTimeout: timeoutMs, connectTimeout: Math.min(timeoutMs, 10_000) });
  }

  /** Sends one request; never throws. */
  async forward(input: {
    method: string;
    path: string;
    headers: Record<string, string | string[]>;
    body: Uint8Array | Readable | null;
  }): Promise<ForwardResult> {
    let answer: Awaited<ReturnType<typeof request>>;
    try {
      answer = await request(this.base + input.path, {
        dispatcher: this.agent,
        method: input.method as 'POST',
        headers: input.headers,
        body: input.body,
      });
    } catch (error) {
      return { kind: 'fault', fault: classify(error) };
    }
    const headers = downstreamResponseHeaders(answer.headers);
    if (NO_BODY.has(answer.statusCode) || input.method === 'HEAD') {
      answer.body.resume();
      return { kind: 'response', response: new Response(null, { status: answer.statusCode, headers }) };
    }
    // The body is read here up to the capture limit, so a connection dropped mid-body is a
    // fault of unknown outcome (the key stays held) rather than a handler's failing stream.
    const chunks: Uint8Array[] = [];
    let size = 0;
    const iterator = answer.body[Symbol.asyncIterator]();
    try {
      while (size <= this.captureBytes) {
        const next = await iterator.next();
        if (next.done) return { kind: 'response', response: new Response(Buffer.concat(chunks), { status: answer.statusCode, headers }) };
        chunks.push(next.value as Buffer);
        size += (next.value as Buffer).length;
      }
    } catch (error) {
      return { kind: 'fault', fault: classify(error, true) };
    }
    // Past the capture limit: the client still gets every byte, streamed; the library stores its
    // too-large problem for the key.
    const rest = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const chunk of chunks) controller.enqueue(chunk);
      },
      async pull(controller) {
        const next = await iterator.next();
        if (next.done) controller.close();
        else controller.enqueue(next.value as Buffer);
      },
      cancel: () => {
        answer.body.destroy();
      },
    });
    return { kind: 'response', response: new Response(rest, { status: answer.statusCode, headers }) };
  }

  /** Closes the pool's connections. */
  close(): Promise<void> {
    return this.agent.close();
  }
}

/** Sorts an undici error by what the upstream may have seen. */
function classify(error: unknown, afterHead = false): UpstreamFault {
  const code = (error as { code?: string }).code ?? (error as { cause?: { code?: string } }).cause?.code;
  if (!afterHead && code !== undefined && UNREACHABLE.has(code)) return { kind: 'unreachable', timedOut: false, error };
  if (!afterHead && code === 'UND_ERR_CONNECT_TIMEOUT') return { kind: 'unreachable', timedOut: true, error };
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') return { kind: 'timeout', error };
  return { kind: 'dropped', error };
}
