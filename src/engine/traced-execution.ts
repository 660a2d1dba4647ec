import type { IdempotencyStore, KeyRef, PhaseResults, StoredResponse } from '../store/types.js';
import { Execution, type ExecutionSettings } from './execution.js';
import type { ExecutionEnd, RequestTelemetry } from './telemetry.js';

/**
 * An {@link Execution} that reports to a {@link RequestTelemetry}: each phase, call and the
 * finish run as child operations of the request, and the end of the execution (finished,
 * released, discarded, fenced) ends the request. The engine makes one when it has `telemetry`.
 */
export class TracedExecution<Tx = unknown> extends Execution<Tx> {
  private telemetryEnded = false;

  constructor(
    store: IdempotencyStore<Tx>,
    settings: ExecutionSettings,
    ref: KeyRef,
    claimId: string,
    recoveryPoint: string,
    phaseResults: PhaseResults,
    private readonly telemetry: RequestTelemetry,
  ) {
    super(store, settings, ref, claimId, recoveryPoint, phaseResults);
    telemetry.executing();
  }

  override phase<T>(name: string, fn: (tx: Tx) => Promise<T>): Promise<T> {
    return this.traced('phase', name, () => super.phase(name, fn));
  }

  override call<T>(name: string, fn: (derivedKey: string, signal: AbortSignal) => Promise<T>): Promise<T> {
    return this.traced('call', name, () => super.call(name, fn));
  }

  override async finish(response: StoredResponse | ((tx: Tx) => Promise<StoredResponse>)): Promise<StoredResponse> {
    const stored = await this.traced('finish', 'finish', () => super.finish(response));
    // A stored 5xx is replayed to every retry: the request failed for good.
    if (stored.status >= 500) this.telemetry.outcome('failed_permanently', { token: this.token });
    this.ended('finished');
    return stored;
  }

  override async release(): Promise<void> {
    await super.release();
    this.ended(this.status === 'lost' ? 'fenced' : 'released');
  }

  override async discard(): Promise<'deleted' | 'released' | 'fenced'> {
    const result = await super.discard();
    this.ended(result === 'deleted' ? 'discarded' : result);
    return result;
  }

  private async traced<T>(kind: 'phase' | 'call' | 'finish', name: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await this.telemetry.span(kind, name, fn);
    } catch (error) {
      if (this.status === 'lost') this.ended('fenced', error);
      throw error;
    }
  }

  private ended(end: ExecutionEnd, error?: unknown): void {
    if (this.telemetryEnded) return;
    this.telemetryEnded = true;
    if (end === 'fenced' || end === 'released') this.telemetry.outcome(end, { token: this.token });
    this.telemetry.end(end, error);
  }
}
