import { ErrorCode, IdempotencyError } from '../core/errors.js';

/**
 * The key was used before with other arguments (protocol.md K3: mismatch is decided first).
 * The first call's result stands; the function did not run.
 */
export class KeyMismatchError extends IdempotencyError {
  /** The scope (the function's name) and the key as stored (protocol.md K47: `sha256:<hex>` for a key outside printable ASCII). */
  readonly scope: string;
  readonly key: string;
  constructor(scope: string, key: string) {
    super(ErrorCode.KeyMismatch, `The key ${JSON.stringify(key)} of ${JSON.stringify(scope)} was used with other arguments; the function did not run`);
    this.scope = scope;
    this.key = key;
  }
}

/** Another caller holds the key's lease (protocol.md K7); call again after `retryAfterMs`. The function did not run. */
export class KeyInProgressError extends IdempotencyError {
  readonly scope: string;
  readonly key: string;
  /** Milliseconds until the holder's lease ends, by the store's clock. */
  readonly retryAfterMs: number;
  constructor(scope: string, key: string, retryAfterMs: number) {
    super(
      ErrorCode.KeyInProgress,
      `The key ${JSON.stringify(key)} of ${JSON.stringify(scope)} is being worked on by another caller; retry in ${retryAfterMs} ms`,
      { retryable: true },
    );
    this.scope = scope;
    this.key = key;
    this.retryAfterMs = retryAfterMs;
  }
}

/** What is stored of an error the function threw, when `storeErrors` asks for it. */
export interface StoredFailure {
  /** The error's `name` (e.g. `TypeError`, `CardDeclined`). */
  name: string;
  message: string;
  /** The error's `code`, when it had a string or number one. */
  code?: string | number;
}

/**
 * The function failed on an earlier call with this key and `storeErrors` kept the failure:
 * thrown on every later call with the key, the function not run again. `failure` is what was
 * stored of the first error.
 */
export class StoredFailureError extends IdempotencyError {
  readonly failure: StoredFailure;
  constructor(failure: StoredFailure, options?: { cause?: unknown }) {
    super(ErrorCode.StoredFailure, `${failure.name}: ${failure.message} (stored by an earlier call with this key)`, options);
    this.failure = failure;
  }
}
