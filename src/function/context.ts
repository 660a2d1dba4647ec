import type { Execution } from '../engine/execution.js';
import { ExecutionContext } from '../engine/execution-context.js';
import { InvalidOptionError, LeaseLostError } from '../core/errors.js';
import type { AttemptEnd } from '../engine/attempt.js';
import { readFailure, type ResultCodec, resultRecord } from './codec.js';
import { StoredFailureError } from './errors.js';

/**
 * What an idempotent function receives first: its key, and the {@link Execution}'s atomic
 * phases, external calls and derived keys, the same context HTTP handlers and queue consumers
 * get (`protocol.md K4`, `K11`).
 *
 * @typeParam Tx the store's transaction handle (a SQL client for the PostgreSQL store).
 * @typeParam R the function's result.
 */
export class FunctionContext<Tx = unknown, R = unknown> extends ExecutionContext<Tx> {
  /** @internal the value `complete` stored, when it ran */
  completed: { value: R } | undefined;

  /** @internal created by `idempotent` */
  constructor(
    execution: Execution<Tx>,
    private readonly codec: ResultCodec<R>,
  ) {
    super(execution);
  }

  /**
   * Finishes the key in the same transaction as the last local effects (`protocol.md K5`):
   * `fn` runs in the transaction and its result is stored with the key. The call then returns
   * this value (read back through the codec), whatever the function returns after it.
   *
   * @returns `fn`'s result, read back through the codec
   * @throws {LeaseLostError} another caller took over; `fn`'s effects were rolled back.
   */
  async complete(fn: (tx: Tx) => Promise<R>): Promise<R> {
    const stored = await this.execution.finish(async (tx) => resultRecord(this.codec, await fn(tx)));
    const value = this.codec.decode(stored.body);
    this.completed = { value };
    return value;
  }
}

/**
 * The value of an attempt's end for a function's caller (protocol.md K36, K46): the stored
 * result, or the error it ended with. Shared by `idempotent` and the durable handler of
 * idem/lambda (protocol.md K54).
 */
export function attemptValue<Tx, R>(end: AttemptEnd, ctx: FunctionContext<Tx, R>, codec: ResultCodec<R>): R {
  switch (end.kind) {
    case 'done':
      return ctx.completed ? ctx.completed.value : codec.decode(end.response.body);
    case 'failed':
    case 'store-unavailable':
      throw end.error;
    case 'failed-permanently':
      // The stored failure, as every later call gets it; this attempt's own error is its cause.
      throw new StoredFailureError(readFailure(end.response!), end.error === undefined ? undefined : { cause: end.error });
    case 'lease-lost':
      throw end.error instanceof LeaseLostError ? end.error : new LeaseLostError();
    case 'released':
      throw new InvalidOptionError('idem: the function ended its execution itself; nothing was stored');
  }
}
