import type { Execution } from './execution.js';

/**
 * The glue every handler's context shares, over HTTP ({@link IdempotencyContext} in
 * `idem/http`) and for queue consumers (`MessageContext` in `idem/consumer`): the key, its
 * scope and lease signal, and the {@link Execution}'s atomic phases (`protocol.md K4`),
 * external calls (`K11`) and derived keys, delegated unchanged. Each subclass adds how its
 * work finishes (`K5`).
 *
 * @typeParam Tx the store's transaction handle (a SQL client for the PostgreSQL store).
 */
export abstract class ExecutionContext<Tx = unknown> {
  /** @internal created by the HTTP core or the consumer */
  constructor(
    /** The execution: atomic phases, external calls, lease. */
    readonly execution: Execution<Tx>,
  ) {}

  /** The idempotency key (the client's key, or a message's id). */
  get key(): string {
    return this.execution.key;
  }
  /** The scope (tenant / credential, queue / consumer group) the key lives in. */
  get scope(): string {
    return this.execution.scope;
  }
  /** True when this attempt took over from a crashed or failed one and resumes after its last phase. */
  get resumed(): boolean {
    return this.execution.resumed;
  }
  /** Aborted when the lease is lost to another worker. */
  get signal(): AbortSignal {
    return this.execution.signal;
  }

  /** See {@link Execution.phase}: local effects committed with the recovery point (`protocol.md K4`). */
  phase<T>(name: string, fn: (tx: Tx) => Promise<T>): Promise<T> {
    return this.execution.phase(name, fn);
  }

  /** See {@link Execution.call}: an external call with a derived key, its result recorded (`protocol.md K11`). */
  call<T>(name: string, fn: (derivedKey: string, signal: AbortSignal) => Promise<T>): Promise<T> {
    return this.execution.call(name, fn);
  }

  /** See {@link Execution.derivedKey}. */
  derivedKey(name: string): string {
    return this.execution.derivedKey(name);
  }
}
