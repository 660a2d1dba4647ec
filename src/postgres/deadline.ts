/**
 * The deadline on each of idem's statements (`storeTimeoutMs`, protocol.md H17) as the pool and
 * driver executors phrase it, over the deadline every store shares (src/store/deadline.ts).
 */
import { StoreTimeoutError, withDeadline } from '../store/deadline.js';

export { StoreTimeoutError };

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
  return withDeadline(promise, ms, `idem/postgres: ${what} took longer than storeTimeoutMs (${ms} ms)`, onTimeout);
}
