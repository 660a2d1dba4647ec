/**
 * HTTP's side of the engine's attempt (src/engine/attempt.ts, protocol.md K5, K23): the policy
 * HTTP runs every request under, and the translation of each {@link AttemptEnd} into the
 * response a client gets. HTTP decides nothing about failures here; it only words them.
 */
import { Attempt, type AttemptEnd, type AttemptPolicy } from '../engine/attempt.js';
import type { Execution } from '../engine/execution.js';
import type { StoredResponse } from '../store/types.js';
import { bodyResponse } from './response.js';
import type { ResponseCapture } from './response.js';
import { OperationState } from '../core/next-step.js';
import { idemProblem, ProblemKind, type ProblemFormat } from './problem.js';

/** What {@link HttpAttempts} needs of the HTTP core. */
export interface HttpAttemptSettings<Tx> {
  maxAttempts: number;
  /** `store`: a handler's throw is the key's stored outcome (`onThrow`). */
  storeThrows: boolean;
  capture: ResponseCapture;
  problems: ProblemFormat;
  /** The response with the expiry header added, when it is on (protocol.md H40). */
  withExpiry: (response: Response, execution: Execution<Tx>) => Response;
}

/** The HTTP attempt: one policy for every request of one handler, and the words for each end. */
export class HttpAttempts<Tx = unknown> {
  readonly policy: AttemptPolicy<Tx>;
  /** The response sent for an outcome stored by the policy (a captured problem), by execution. */
  private readonly sent = new WeakMap<Execution<Tx>, Response>();

  constructor(private readonly settings: HttpAttemptSettings<Tx>) {
    this.policy = {
      maxAttempts: settings.maxAttempts,
      exhausted: (failed, execution) => this.captured(execution, this.permanentProblem(execution, failed)),
      storeFailure: settings.storeThrows
        ? (_error, execution) =>
            this.captured(
              execution,
              this.problem(
                ProblemKind.ExecutionFailed,
                500,
                'The request failed. This outcome is stored for this idempotency key.',
                undefined,
                stateOf(execution),
              ),
            )
        : undefined,
    };
  }

  /** protocol.md K23: the answer when a takeover found the key's attempts spent, or undefined to run the handler. */
  async start(execution: Execution<Tx>): Promise<Response | undefined> {
    if (execution.failedAttempts === undefined) return undefined;
    const end = await new Attempt(execution, this.policy).start();
    if (end?.kind === 'store-unavailable') return this.storeUnavailable();
    return end && this.answer(execution, end, undefined);
  }

  /** The handler threw (or its body stream failed): the failure rule decides, this words it. */
  async fail(execution: Execution<Tx>, error: unknown): Promise<Response> {
    return this.answer(execution, await new Attempt(execution, this.policy).fail(error), error);
  }

  /** Stores `stored` (fenced): undefined when recorded, else the answer to send instead (409 lease lost, 503 store down). */
  async record(execution: Execution<Tx>, stored: StoredResponse): Promise<Response | undefined> {
    const end = await new Attempt(execution, this.policy).succeed(stored);
    return end.kind === 'done' ? undefined : this.answer(execution, end, undefined);
  }

  /** The response for `end`. */
  answer(execution: Execution<Tx>, end: AttemptEnd, error: unknown): Response {
    switch (end.kind) {
      case 'done':
      case 'failed-permanently':
        return end.response ? this.sentFor(execution, end.response) : this.failed(execution);
      case 'failed':
        return end.stored ? this.sentFor(execution, end.stored) : this.failed(execution);
      case 'lease-lost':
        return this.leaseLost();
      case 'store-unavailable':
        // The handler returned and its response was not recorded: its work may stand.
        return error === undefined
          ? this.problem(ProblemKind.StoreUnavailable, 503, 'The response could not be recorded. Retry with the same key.', { 'retry-after': '1' })
          : this.failed(execution);
      case 'released':
        return this.failed(execution);
    }
  }

  /** 409 `lease-lost`: another attempt took over this key. */
  leaseLost(): Response {
    return this.problem(
      ProblemKind.LeaseLost,
      409,
      'Another attempt took over this request after its lease expired; this attempt stopped without recording a result. Retry with the same key to get the outcome.',
      { 'retry-after': '1' },
    );
  }

  /** 503 `store-unavailable`: nothing was executed. */
  storeUnavailable(): Response {
    return this.problem(ProblemKind.StoreUnavailable, 503, 'The idempotency store is unreachable; nothing was executed. Retry with the same key.', {
      'retry-after': '1',
    });
  }

  /** The 500 of a failed attempt that was released: the next one resumes (protocol.md K10). */
  private failed(execution: Execution<Tx>): Response {
    return this.problem(
      ProblemKind.ExecutionFailed,
      500,
      'The request failed before it completed. Retry with the same idempotency key; completed steps are not repeated.',
      undefined,
      stateOf(execution),
    );
  }

  /** The `request-failed-permanently` problem (protocol.md K5, K23). */
  private permanentProblem(execution: Execution<Tx>, failed: number): Response {
    // After a committed step (a charge row, a provider call) a new key would run every step
    // again: the detail says so instead of inviting a resend.
    const attempts = `${failed} attempt${failed === 1 ? '' : 's'}`;
    const detail = execution.workStarted
      ? `The request failed on ${attempts} after some of its steps had completed (recovery point '${execution.recoveryPoint}'), and will not be tried again with this idempotency key. ` +
        'Their effects remain: check them before sending the request again with a new key, which would run every step again.'
      : execution.effectsMayExist
        ? `The request failed on ${attempts} and will not be tried again with this idempotency key. No step recorded a result, but an earlier attempt may have ` +
          "called another system with one of this key's derived keys before it failed: unless the handler makes no such call, check before you fix the request and send it with a new key."
        : `The request failed on ${attempts} and will not be tried again with this idempotency key. Fix the request and send it with a new key.`;
    return this.problem(ProblemKind.FailedPermanently, 500, detail, undefined, stateOf(execution));
  }

  /** Captures `response` for storing; the copy to send is kept for {@link sentFor}. */
  private async captured(execution: Execution<Tx>, response: Response): Promise<StoredResponse> {
    const { stored, response: sent } = await this.settings.capture(response);
    this.sent.set(execution, sent);
    return stored;
  }

  /** The response to send for an outcome the policy stored, with the expiry header. */
  private sentFor(execution: Execution<Tx>, stored: StoredResponse): Response {
    const sent = this.sent.get(execution) ?? bodyResponse(stored.status, stored.body, { headers: stored.headers });
    this.sent.delete(execution);
    return this.settings.withExpiry(sent, execution);
  }

  private problem(kind: ProblemKind, status: number, detail: string, headers?: Record<string, string>, state?: OperationState): Response {
    return idemProblem(kind, status, detail, this.settings.problems, headers, state);
  }
}

/** A failed attempt's next step (protocol.md H41): a new key is safe only when no declared effect of the key can exist. */
function stateOf(execution: Execution<unknown>): OperationState {
  return execution.effectsMayExist ? OperationState.MaybeApplied : OperationState.NotApplied;
}
