/**
 * The store deadline shared by every store that talks to a server (`storeTimeoutMs`,
 * protocol.md H17): a call to a database or Redis that accepts connections and never answers
 * fails after the deadline instead of hanging the request. The engine reports the failure as
 * the store being unavailable (HTTP 503 with `Retry-After`); a failed attempt does not count
 * toward `maxAttempts` (the error is `retryable`, protocol.md K5).
 */
import { StoreTimeoutError } from '../core/errors.js';

export { StoreTimeoutError };

/** Default deadline of each call a store makes to its server, in ms (`storeTimeoutMs`). */
export const DEFAULT_STORE_TIMEOUT_MS = 5000;

/**
 * Settles like `promise`, or rejects with a {@link StoreTimeoutError} carrying `message` after
 * `ms` and calls `onTimeout` first. `ms` of `0` (or not a finite positive number): no deadline.
 * The late outcome of `promise` is ignored (its rejection is handled, so it is never unhandled).
 * `message` may be a function, called only when the deadline passes.
 *
 * One promise and one timer per call, settled by whichever comes first: it wraps every
 * statement idem sends, and the `Promise.race` form (a promise for the timer, the race, a
 * `finally`) cost a PostgreSQL replay about a quarter of idem's own CPU time (bench/notes.md).
 */
export function withDeadline<T>(promise: Promise<T>, ms: number, message: string | (() => string), onTimeout?: () => void): Promise<T> {
  if (!(ms > 0 && Number.isFinite(ms))) return promise;
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      onTimeout?.();
      reject(new StoreTimeoutError(typeof message === 'function' ? message() : message));
    }, ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
