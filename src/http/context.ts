import type { Execution } from '../engine/execution.js';
import { ExecutionContext } from '../engine/execution-context.js';
import type { ResponseCapture } from './response.js';

/**
 * What a protected handler receives: the {@link Execution} of this request's key (key, scope,
 * phases and calls from {@link ExecutionContext}), plus the two HTTP-level decisions only the
 * handler can make.
 *
 * @typeParam Tx the store's transaction handle (a SQL client for the PostgreSQL store).
 */
export class IdempotencyContext<Tx = unknown> extends ExecutionContext<Tx> {
  /** @internal set when the handler rejected the request before work started */
  rejected = false;

  /** @internal created by the HTTP core */
  constructor(
    execution: Execution<Tx>,
    private readonly capture: ResponseCapture,
  ) {
    super(execution);
  }

  /**
   * Finishes in the same transaction as the last local effects (protocol.md K5): `fn` runs in
   * the transaction and returns the response, which is stored before the transaction
   * commits. Return the resolved response from the handler.
   *
   * @throws {LeaseLostError} another worker took over; `fn`'s effects were rolled back.
   */
  async respond(fn: (tx: Tx) => Promise<Response>): Promise<Response> {
    let sent: Response | undefined;
    await this.execution.finish(async (tx) => {
      const captured = await this.capture(await fn(tx));
      sent = captured.response;
      return captured.stored;
    });
    return sent!;
  }

  /**
   * Marks the request as rejected before work started (failed validation): its response is
   * not stored and the claim is deleted, so the client can fix the request and retry with the
   * same key (protocol.md K10). Has no effect once a phase has committed.
   */
  reject(): void {
    this.rejected = true;
  }
}
