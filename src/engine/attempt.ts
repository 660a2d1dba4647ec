/**
 * One attempt of one key, owned by the engine (protocol.md K5, K10, K23): every surface (HTTP
 * and its adapters, the consumers, Lambda, webhooks, `idempotent(fn)`, tool calls) runs its
 * work through it and only translates the {@link AttemptEnd} it returns. It holds the one
 * failure rule: a failure the same request would meet again counts toward `maxAttempts` on
 * every store, a transient one never does, and the last allowed attempt stores the key's
 * permanent outcome (or, where the surface keeps none, releases it for good).
 */
import { LeaseLostError, UnencodableResultError } from '../core/errors.js';
import type { StoredResponse } from '../store/types.js';
import type { Execution } from './execution.js';
import { checkResponse } from './execution-checks.js';
import { countsAsFailure } from './failures.js';

/** What a surface decides about its attempts: one type for every surface (docs/architecture.md has the table of defaults). */
export interface AttemptPolicy<Tx = unknown> {
  /**
   * Failed attempts of one key before it ends for good (protocol.md K5): thrown failures that
   * count, and crashes (leases that ran out unreleased, K23). `Infinity`: never.
   */
  maxAttempts: number;
  /** Which failures count toward `maxAttempts`. @default {@link countsAsFailure} (not `retryable`, not `transient`) */
  counts?: (error: unknown) => boolean;
  /**
   * A failure's stored outcome, when the surface keeps failures (`onThrow: 'store'`,
   * `storeErrors`): the key replays it from then on. `undefined`: the failure is counted and
   * the key released, so the next attempt resumes from its recovery point (K10).
   */
  storeFailure?: (error: unknown, execution: Execution<Tx>) => StoredResponse | undefined | Promise<StoredResponse | undefined>;
  /**
   * The key's permanent outcome when it has failed `maxAttempts` times (K23): stored and
   * replayed from then on. `undefined` (or a function that returns it): nothing is stored, the
   * key is released and the end is reported (a consumer dead-letters the message). `error`: the
   * last attempt's failure, when it was one (an {@link UnencodableResultError} ends the key at
   * once, whatever the count: K46).
   */
  exhausted?: (failedAttempts: number, execution: Execution<Tx>, error?: unknown) => StoredResponse | undefined | Promise<StoredResponse | undefined>;
  /**
   * The source's own count of this attempt (a broker's delivery count, 1 on the first
   * delivery), when it keeps one: a failure that counts ends the key at the larger of it and
   * the store's count. A takeover's crash count ends the key too, except on a first delivery
   * (a re-drive from a dead-letter queue gets one more run).
   */
  deliveries?: number | undefined;
}

/** How an attempt ended. Surfaces translate it; none decides it. */
export type AttemptEnd =
  /** The work's outcome is stored (fenced): replay it from now on. */
  | { kind: 'done'; response: StoredResponse }
  /**
   * The work failed. `stored`: the failure is the key's outcome (kept by `storeFailure`);
   * otherwise the key was released and a retry resumes from the recovery point. `counted`:
   * whether this failure counted toward `maxAttempts`, and `failedAttempts` the count when known.
   */
  | { kind: 'failed'; error: unknown; counted: boolean; failedAttempts?: number | undefined; stored?: StoredResponse }
  /**
   * The key failed `maxAttempts` times and will not run again with this key (K5, K23).
   * `response`: the stored permanent outcome, when the policy keeps one; `error`: this
   * attempt's failure, when it was the last one (undefined when a takeover found the count spent).
   */
  | { kind: 'failed-permanently'; failedAttempts: number; response?: StoredResponse | undefined; error?: unknown }
  /** The work ended its execution without an outcome (a release or discard of its own). */
  | { kind: 'released' }
  /** Another worker took the key over: nothing this attempt wrote after that stands (K8). */
  | { kind: 'lease-lost'; error?: unknown }
  /** The store failed while the outcome was written; the key was released where the store allowed (H17). */
  | { kind: 'store-unavailable'; error: unknown };

/**
 * The attempt on one execution: {@link start} before the work (K23's crash loop), then
 * {@link succeed} or {@link fail} once. Surfaces that hand the work's end to a framework (a
 * streamed HTTP response) hold it in between.
 */
export class Attempt<Tx = unknown> {
  readonly execution: Execution<Tx>;
  readonly policy: AttemptPolicy<Tx>;

  constructor(execution: Execution<Tx>, policy: AttemptPolicy<Tx>) {
    this.execution = execution;
    this.policy = policy;
  }

  /**
   * protocol.md K23: a takeover that read `maxAttempts` failed attempts (crashes too) ends the
   * key without running the work. `undefined`: run the work.
   */
  async start(): Promise<AttemptEnd | undefined> {
    const failed = this.execution.failedAttempts;
    const { maxAttempts, deliveries } = this.policy;
    if (failed === undefined || failed < maxAttempts) return undefined;
    if (deliveries !== undefined && deliveries <= 1) return undefined; // a re-drive (a fresh publish) gets one more run
    return this.end(failed, undefined);
  }

  /**
   * Stores the work's outcome (fenced, in one transaction with the last local effects when a
   * function is given). An execution the work finished itself ends `done` with what it stored.
   */
  async succeed(response: StoredResponse | ((tx: Tx) => Promise<StoredResponse>)): Promise<AttemptEnd> {
    const execution = this.execution;
    if (execution.status === 'lost') return { kind: 'lease-lost' };
    if (execution.status === 'done' && execution.stored) return { kind: 'done', response: execution.stored }; // the work finished it itself
    if (execution.status !== 'open') return { kind: 'released' };
    if (typeof response !== 'function') {
      // protocol.md K46: a response that cannot be stored is refused before the store is asked,
      // and ends the key for good (the work ran), not as the store unavailable.
      try {
        checkResponse(response);
      } catch (error) {
        return this.unrecordable(new UnencodableResultError(`idem: the work's outcome cannot be stored: ${(error as Error).message}`, { cause: error }));
      }
    }
    try {
      return { kind: 'done', response: await execution.finish(response) };
    } catch (error) {
      return this.storeFailed(error);
    }
  }

  /** The work failed with `error`: store it, count it, end the key at the last attempt, or release it (protocol.md K5, K10). */
  async fail(error: unknown): Promise<AttemptEnd> {
    const execution = this.execution;
    if (error instanceof LeaseLostError || execution.status === 'lost') return { kind: 'lease-lost', error };
    if (execution.status !== 'open') return { kind: 'failed', error, counted: false }; // the work ended it itself first
    if (error instanceof UnencodableResultError) return this.unrecordable(error);
    const stored = await this.policy.storeFailure?.(error, execution);
    if (stored !== undefined) {
      const end = await this.succeed(stored);
      if (end.kind === 'done') return { kind: 'failed', error, counted: false, stored: end.response };
      if (end.kind !== 'store-unavailable') return end;
      return { kind: 'failed', error, counted: false }; // released by succeed; the next attempt runs again
    }
    const counts = (this.policy.counts ?? countsAsFailure)(error);
    let failed: number | undefined;
    if (counts && this.policy.maxAttempts !== Infinity) {
      try {
        failed = await execution.countFailure();
        // A source that counts deliveries (a broker) counts this one too: the larger count
        // rules, so neither a lost count in the store nor a broker's reset lets the work run on.
        const deliveries = this.policy.deliveries;
        if (deliveries !== undefined) failed = Math.max(failed ?? 0, deliveries);
      } catch (countError) {
        if (countError instanceof LeaseLostError) return { kind: 'lease-lost', error };
        // The store failed: release below (the lease runs out if that fails too); not counted.
        await execution.release().catch(() => undefined);
        return { kind: 'failed', error, counted: false };
      }
    }
    if (failed !== undefined && failed >= this.policy.maxAttempts) return this.end(failed, error);
    await execution.release().catch(() => undefined);
    return { kind: 'failed', error, counted: counts && failed !== undefined, failedAttempts: failed };
  }

  /**
   * protocol.md K46: the work ran (its effects stand) but its outcome cannot be stored (a result
   * its codec refused, a response no store can hold). A rerun
   * would repeat the effects, so the key ends for good now, whatever `maxAttempts` says: counted,
   * then the permanent outcome stored (the surface's, from `exhausted`) or, where the surface
   * keeps none, released with the end reported (a consumer dead-letters).
   */
  private async unrecordable(error: UnencodableResultError): Promise<AttemptEnd> {
    let failed: number | undefined;
    try {
      failed = await this.execution.countFailure();
    } catch (countError) {
      if (countError instanceof LeaseLostError) return { kind: 'lease-lost', error };
      // the store failed: the permanent outcome is still tried below
    }
    return this.end(Math.max(failed ?? 1, this.policy.deliveries ?? 1), error);
  }

  /** The key's last attempt: store the permanent outcome, or release it when the policy keeps none. */
  private async end(failed: number, error: unknown): Promise<AttemptEnd> {
    const execution = this.execution;
    let response: StoredResponse | undefined;
    try {
      response = await this.policy.exhausted?.(failed, execution, error);
      if (response === undefined) {
        await execution.release().catch(() => undefined);
        return { kind: 'failed-permanently', failedAttempts: failed, error };
      }
      response = await execution.finish(response);
    } catch (finishError) {
      return this.storeFailed(finishError);
    }
    return { kind: 'failed-permanently', failedAttempts: failed, response, error };
  }

  /** A fenced write failed: lease lost, or the store failed (released where it can be). */
  private async storeFailed(error: unknown): Promise<AttemptEnd> {
    if (error instanceof LeaseLostError) return { kind: 'lease-lost', error };
    await this.execution.release().catch(() => undefined);
    return { kind: 'store-unavailable', error };
  }
}

/** What the work of {@link runAttempt} returns: the outcome to store, or a function that stores it with the last local effects. */
export type WorkOutcome<Tx> = StoredResponse | ((tx: Tx) => Promise<StoredResponse>);

/** Runs one attempt: the crash-loop check, the work, then its outcome stored or its failure ruled on. */
export async function runAttempt<Tx>(attempt: Attempt<Tx>, work: (execution: Execution<Tx>) => Promise<WorkOutcome<Tx>>): Promise<AttemptEnd> {
  const ended = await attempt.start();
  if (ended) return ended;
  let outcome: WorkOutcome<Tx>;
  try {
    outcome = await work(attempt.execution);
  } catch (error) {
    return attempt.fail(error);
  }
  return attempt.succeed(outcome);
}
