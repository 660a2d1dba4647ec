/**
 * Errors thrown by `idem/client`: `IdempotencyError`s (the library's one base class, pure, browser-safe)
 * with `IDEM_CLIENT_*` codes. Each has a stable `code` (match on it, never on the message)
 * and, where another error caused it, `cause`. A final HTTP response (201, 402, 422, ...) is a
 * result, never an error: only misuse, a horizon that outlives the server's retention, and
 * giving up with no response at all throw.
 */
import { ErrorCode, IdempotencyError, MissingDependencyError } from '../core/errors.js';

export { ErrorCode, IdempotencyError, MissingDependencyError };

/** An option is out of range (a negative delay, zero attempts, a non-function hook, ...). */
export class InvalidClientOptionError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.ClientInvalidOption, message);
  }
}

/**
 * The retry horizon (`maxElapsedMs` plus one `attemptTimeoutMs`) is not shorter than the
 * server's declared retention (`serverRetentionMs`): a late retry could reach the server after
 * it forgot the key and run the work a second time (protocol.md H22). Thrown by the `IdempotentClient` constructor.
 */
export class HorizonExceedsRetentionError extends IdempotencyError {
  constructor(
    /** `maxElapsedMs + attemptTimeoutMs`, in ms. */
    readonly horizonMs: number,
    /** The server's declared retention, in ms. */
    readonly serverRetentionMs: number,
  ) {
    super(
      ErrorCode.HorizonExceedsRetention,
      `retry horizon ${horizonMs} ms (maxElapsedMs + attemptTimeoutMs) must be shorter than the server's retention ${serverRetentionMs} ms`,
    );
  }
}

/**
 * The client stopped retrying an intent without any HTTP response: every attempt failed with a
 * network error or a timeout, and the horizon (attempts or elapsed ms) ran out. The server may or
 * may not have done the work; the key in `key` is the one to ask it about. `cause` is the last
 * attempt's error. (When the last attempt did get a response, e.g. a 503, the client returns that
 * response instead of throwing, as `fetch` would.)
 */
export class GaveUpError extends IdempotencyError {
  constructor(
    /** The intent's idempotency key. */
    readonly key: string,
    /** Attempts made over the intent's whole life (also before a restart). */
    readonly attempts: number,
    /** Why: `attempts` (maxAttempts reached), `elapsed` (maxElapsedMs reached). */
    readonly reason: 'attempts' | 'elapsed',
    cause: unknown,
  ) {
    super(ErrorCode.GaveUp, `gave up on idempotency key ${key} after ${attempts} attempts (${reason} horizon reached)`, { cause });
  }
}

/** `send(key)` or `discard(key)` named a key the intent store does not hold. */
export class UnknownIntentError extends IdempotencyError {
  constructor(readonly key: string) {
    super(ErrorCode.UnknownIntent, `no persisted intent with idempotency key ${key}`);
  }
}
