import { ErrorCode, IdempotencyError } from '../core/errors.js';

/**
 * A partitioned PostgreSQL store has no partition for today (UTC): `store.maintain()` or
 * `idem partitions` has not run. Retryable: the next attempt succeeds once maintenance has run.
 */
export class MissingPartitionError extends IdempotencyError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(ErrorCode.MissingPartition, message, { cause: options?.cause, retryable: true });
  }
}

/**
 * A PGlite data directory could not be locked for this process (`lockDataDir`): another live
 * process holds it, or its pid file cannot be written. Not retryable while that process runs.
 */
export class DataDirLockedError extends IdempotencyError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(ErrorCode.DataDirLocked, message, options);
  }
}
