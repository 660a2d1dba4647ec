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
