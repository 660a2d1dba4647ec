/**
 * `idem/function`: any async function made idempotent: a cron job, a command handler, a
 * workflow step. Typed arguments and result; a key from the arguments (or given by the call);
 * phases through the same context HTTP handlers and queue consumers get; the result stored and
 * replayed as a value. See docs/guides/functions.md.
 */
export { idempotent, type CallOutcome, type FunctionOptions, type IdempotentFunction } from './idempotent.js';
export { FunctionContext } from './context.js';
export { jsonCodec, type ResultCodec } from './codec.js';
export { KeyInProgressError, KeyMismatchError, StoredFailureError, type StoredFailure } from './errors.js';
