/**
 * One Lambda invocation as both Lambda surfaces see it (the HTTP wrapper in `index.ts`, the
 * batch handlers in `batch.ts`): the slice of the context read, and the lease it allows.
 */

/** The slice of the Lambda context used here. */
export interface LambdaContextLike {
  /** Milliseconds left before Lambda ends this invocation. */
  getRemainingTimeInMillis(): number;
}

/** How long a key stays exclusive for an invocation with `remainingMs` left. */
export function invocationLeaseMs(remainingMs: number, marginMs: number): number {
  return Math.max(1, Math.ceil(remainingMs)) + marginMs;
}
