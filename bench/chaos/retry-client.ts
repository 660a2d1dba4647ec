/**
 * The client side of an intent: one idempotency key, the same body bytes on every attempt,
 * retries on network errors, attempt timeouts, 409, 429 and 5xx with exponential backoff and
 * full jitter, honouring Retry-After (protocol.md H21-H22). Which answers are final is
 * `idem/client`'s own rule (`classifyStatus`): a replay (`Idempotent-Replayed: true`) is the
 * key's stored outcome and final whatever its status, as the 500 problem
 * `request-failed-permanently` of a key whose leases ran out unreleased `maxAttempts` times
 * (protocol.md K23): sending it again gets the same answer until the horizon.
 */
import { classifyStatus, parseRetryAfterMs } from '../../src/client/retry-policy.js';

export interface Attempted {
  /** The final response: status and exact body bytes; `undefined` when the horizon ran out. */
  final?: { status: number; body: Uint8Array; replayed: boolean };
  /** Attempts made. */
  attempts: number;
  /** 409 answers that said the attempt's lease was lost (a stale worker fenced). */
  leaseLost409: number;
  /** ms from the first attempt to the final response. */
  elapsedMs: number;
  /**
   * What each attempt got, oldest first (the last 12): a status (`409`, `502`…) or the error
   * (`timeout` for the attempt's own timeout, `network` for fetch's TypeError: refused, reset,
   * closed; otherwise the error's name), with the ms since the first attempt: `409@5300`. Says why an intent
   * got no final answer.
   */
  history: string[];
  /** The body of the last 5xx answer (its first 300 bytes), when there was no final answer. */
  lastErrorBody?: string;
}

export interface SendOptions {
  url: string;
  headers: Record<string, string>;
  body: Uint8Array;
  /** One attempt's timeout in ms (then it is abandoned and retried). */
  attemptTimeoutMs: number;
  /** Give up after this many ms in all. */
  horizonMs: number;
  /** First backoff in ms; doubles per attempt up to `maxBackoffMs`. */
  baseBackoffMs?: number;
  maxBackoffMs?: number;
}

const LEASE_LOST = 'urn:idem:problem:idempotency-lease-lost';

/** POSTs until a final answer (2xx, 4xx other than 409/429, any replay) or the horizon. */
export async function sendWithRetries(o: SendOptions): Promise<Attempted> {
  const start = Date.now();
  const base = o.baseBackoffMs ?? 50;
  const cap = o.maxBackoffMs ?? 1000;
  let attempts = 0;
  let leaseLost409 = 0;
  const history: string[] = [];
  let lastErrorBody: string | undefined;
  const note = (what: string) => {
    history.push(`${what}@${Date.now() - start}`);
    if (history.length > 12) history.shift();
  };
  for (;;) {
    attempts++;
    let retryAfterMs = 0;
    try {
      const res = await fetch(o.url, {
        method: 'POST',
        headers: o.headers,
        body: o.body,
        signal: AbortSignal.timeout(o.attemptTimeoutMs),
      });
      const body = new Uint8Array(await res.arrayBuffer());
      const replayed = res.headers.get('idempotent-replayed') === 'true';
      note(String(res.status));
      if (res.status >= 500 && body.length > 0) lastErrorBody = new TextDecoder().decode(body.subarray(0, 300));
      if (classifyStatus(res.status, replayed) === 'final') {
        return {
          final: { status: res.status, body, replayed },
          attempts,
          leaseLost409,
          elapsedMs: Date.now() - start,
          history,
        };
      }
      if (res.status === 409 && new TextDecoder().decode(body).includes(LEASE_LOST)) leaseLost409++;
      retryAfterMs = Math.min(parseRetryAfterMs(res.headers.get('retry-after'), Date.now()) ?? 0, cap);
    } catch (error) {
      // network error, reset or attempt timeout: retry with the same key
      const name = (error as Error)?.name;
      note(name === 'TimeoutError' ? 'timeout' : name === 'TypeError' ? 'network' : String(name));
    }
    if (Date.now() - start > o.horizonMs) return { attempts, leaseLost409, elapsedMs: Date.now() - start, history, lastErrorBody };
    const backoff = Math.random() * Math.min(cap, base * 2 ** Math.min(attempts - 1, 10));
    await new Promise((resolve) => setTimeout(resolve, Math.max(backoff, retryAfterMs)));
  }
}
