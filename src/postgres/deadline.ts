/** The deadline on each of idem's statements (`storeTimeoutMs`, protocol.md H17), shared by the pool and driver executors. */

/**
 * A statement of idem's missed its deadline (`storeTimeoutMs`), or the pool's queue was full:
 * the database is silent, down or overloaded. The engine answers 503 with `Retry-After`.
 */
export class StoreTimeoutError extends Error {
  override readonly name = 'StoreTimeoutError';
}

/** True when `ms` is a deadline (`0` or `Infinity`: none). */
export function hasDeadline(ms: number): boolean {
  return ms > 0 && Number.isFinite(ms);
}

/** The statement's first two words, for an error message (never its parameters). */
export function describeStatement(text: string): string {
  return `the statement ${text.trim().split(/\s+/, 2).join(' ')}`;
}

/** Settles like `promise`, or rejects with a {@link StoreTimeoutError} after `ms` and calls `onTimeout`. */
export function deadline<T>(promise: Promise<T>, ms: number, what: string, onTimeout: () => void): Promise<T> {
  if (!hasDeadline(ms)) return promise;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      onTimeout();
      reject(new StoreTimeoutError(`idem/postgres: ${what} took longer than storeTimeoutMs (${ms} ms)`));
    }, ms);
  });
  promise.catch(() => undefined); // its late failure is expected once the deadline has passed
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}
