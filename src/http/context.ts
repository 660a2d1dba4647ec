import type { Execution } from '../engine/execution.js';
import type { ResponseCapture } from './response.js';

/**
 * What a protected handler receives: the {@link Execution} of this request's key, plus the
 * two HTTP-level decisions only the handler can make.
 *
 * @typeParam Tx the store's transaction handle (a SQL client for the PostgreSQL store).
 */
export class IdempotencyContext<Tx = unknown> {
  /** @internal set when the handler rejected the request before work started */
  rejected = false;

  /** @internal created by the HTTP core */
  constructor(
    /** The execution: atomic phases, external calls, lease. */
    readonly execution: Execution<Tx>,
    private readonly capture: ResponseCapture,
  ) {}

  /** The client's idempotency key. */
  get key(): string {
    return this.execution.key;
  }
  /** The scope (tenant / credential) the key lives in. */
  get scope(): string {
    return this.execution.scope;
  }
  /** True when this attempt took over from a crashed or failed one. */
  get resumed(): boolean {
    return this.execution.resumed;
  }
  /** Aborted when the lease is lost to another worker. */
  get signal(): AbortSignal {
    return this.execution.signal;
  }

  /** See {@link Execution.phase}: local effects committed with the recovery point. */
  phase<T>(name: string, fn: (tx: Tx) => Promise<T>): Promise<T> {
    return this.execution.phase(name, fn);
  }

  /** See {@link Execution.call}: an external call with a derived key, its result recorded. */
  call<T>(name: string, fn: (derivedKey: string, signal: AbortSignal) => Promise<T>): Promise<T> {
    return this.execution.call(name, fn);
  }

  /** See {@link Execution.derivedKey}. */
  derivedKey(name: string): string {
    return this.execution.derivedKey(name);
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
