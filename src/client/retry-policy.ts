/**
 * Which answers are retried and how long to wait: pure functions, no I/O (protocol.md H22).
 */

/**
 * What to do with a response to an attempt that carried an idempotency key.
 * - `final`: 1xx-3xx, every 4xx but 409 and 429 (400 and 422 mean the request itself is wrong;
 *   sending it again cannot help), and any replay (`Idempotent-Replayed: true` is the stored
 *   outcome: a retry would get the same answer).
 * - `retry`: 409 (the first attempt is still in progress, draft §2.6), 429, and 5xx.
 */
export function classifyStatus(status: number, replayed: boolean): 'final' | 'retry' {
  if (replayed) return 'final';
  if (status === 409 || status === 429 || status >= 500) return 'retry';
  return 'final';
}

/**
 * The wait a `Retry-After` header asks for, in ms (RFC 9110 §10.2.3): delta-seconds (`"2"`) or an
 * HTTP-date (`"Wed, 21 Oct 2026 07:28:00 GMT"`, measured against `nowMs`, never negative).
 * `undefined` when absent or malformed.
 */
export function parseRetryAfterMs(value: string | null, nowMs: number): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  // Only date-looking values: Date.parse would also accept "1.5" as a year.
  if (!/[a-z]/i.test(text)) return undefined;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

/**
 * Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff And
 * Jitter"): a uniform random wait in [0, min(maxDelayMs, baseDelayMs × 2^(retry-1))), in ms.
 * `retry` is 1 for the wait before the second attempt. Full jitter spreads the retries of many
 * clients cut off by one outage, so they do not come back in lockstep.
 */
export function fullJitterDelayMs(retry: number, baseDelayMs: number, maxDelayMs: number, random: () => number): number {
  const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** Math.max(0, retry - 1));
  return Math.floor(random() * ceiling);
}
