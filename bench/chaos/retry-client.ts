/**
 * The client side of an intent: one idempotency key, the same body bytes on every attempt,
 * retries on network errors, attempt timeouts, 409 and 5xx with exponential backoff and full
 * jitter, honouring Retry-After (protocol.md H21-H22). A minimal stand-in for `idem/client`
 * (issue 3), kept in this one file so the real client can replace it.
 */

export interface Attempted {
  /** The final response: status and exact body bytes; `undefined` when the horizon ran out. */
  final?: { status: number; body: Uint8Array; replayed: boolean };
  /** Attempts made. */
  attempts: number;
  /** 409 answers that said the attempt's lease was lost (a stale worker fenced). */
  leaseLost409: number;
  /** ms from the first attempt to the final response. */
  elapsedMs: number;
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

/** POSTs until a final answer (2xx, or 4xx other than 409/429) or the horizon. */
export async function sendWithRetries(o: SendOptions): Promise<Attempted> {
  const start = Date.now();
  const base = o.baseBackoffMs ?? 50;
  const cap = o.maxBackoffMs ?? 1000;
  let attempts = 0;
  let leaseLost409 = 0;
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
      const retryable = res.status === 409 || res.status === 429 || res.status >= 500;
      if (!retryable) {
        return {
          final: { status: res.status, body, replayed: res.headers.get('idempotent-replayed') === 'true' },
          attempts,
          leaseLost409,
          elapsedMs: Date.now() - start,
        };
      }
      if (res.status === 409 && new TextDecoder().decode(body).includes(LEASE_LOST)) leaseLost409++;
      const header = Number(res.headers.get('retry-after'));
      if (Number.isFinite(header) && header > 0) retryAfterMs = Math.min(header * 1000, cap);
    } catch {
      // network error, reset or attempt timeout: retry with the same key
    }
    if (Date.now() - start > o.horizonMs) return { attempts, leaseLost409, elapsedMs: Date.now() - start };
    const backoff = Math.random() * Math.min(cap, base * 2 ** Math.min(attempts - 1, 10));
    await new Promise((resolve) => setTimeout(resolve, Math.max(backoff, retryAfterMs)));
  }
}
