import type { Execution } from '../engine/execution.js';
import { ExecutionContext } from '../engine/execution-context.js';
import type { ConsumedMessage } from './types.js';

/**
 * What a message handler receives: the message, and the {@link Execution} of its key with the
 * same `phase` / `call` / `complete` shape an HTTP handler gets (`protocol.md K4`, `K5`, `K11`).
 *
 * @typeParam Tx the store's transaction handle (a SQL client for the PostgreSQL store).
 */
export class MessageContext<Tx = unknown> extends ExecutionContext<Tx> {
  /** @internal the value `complete` stored, when it ran */
  completed: { result: unknown } | undefined;

  /** @internal created by {@link IdempotentConsumer.consume} */
  constructor(
    /** The message as the broker adapter handed it over. */
    readonly message: ConsumedMessage,
    execution: Execution<Tx>,
  ) {
    super(execution);
  }

  /** Which delivery this is, 1-based, as counted by the broker. */
  get attempt(): number {
    return this.message.attempt ?? 1;
  }

  /**
   * Finishes the key in the same transaction as the last local effects (`protocol.md K5`):
   * `fn` runs in the transaction; its JSON result is stored with the key. Without a call to
   * `complete`, the consumer finishes the key with no effects when the handler returns.
   *
   * @returns `fn`'s result
   * @throws {LeaseLostError} another consumer took over; `fn`'s effects were rolled back.
   */
  async complete<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    let value: T | undefined;
    await this.execution.finish(async (tx) => {
      value = await fn(tx);
      return resultResponse(value);
    });
    this.completed = { result: value };
    return value as T;
  }
}

/** The stored "response" of a consumed message: status 200 and the handler's JSON result, if any. */
export function resultResponse(value: unknown): { status: number; headers: Array<[string, string]>; body: Uint8Array } {
  const text = value === undefined ? '' : JSON.stringify(value);
  return {
    status: 200,
    headers: text ? [['content-type', 'application/json']] : [],
    body: new TextEncoder().encode(text ?? ''),
  };
}
