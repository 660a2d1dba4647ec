/**
 * The engine's tracing and metrics hook, free of any telemetry library: `idem/otel` implements
 * it with `@opentelemetry/api` (docs/observability.md names its spans and metrics).
 */

/**
 * What happened to one idempotent request. `created`, `taken_over`, `replayed`, `waited`,
 * `in_progress`, `mismatch` and `store_unavailable` are decided when the request begins;
 * `released`, `fenced` and `failed_permanently` when its execution ends.
 */
export type IdempotencyOutcome =
  | 'created'
  | 'replayed'
  | 'in_progress'
  | 'waited'
  | 'mismatch'
  | 'taken_over'
  | 'fenced'
  | 'released'
  | 'failed_permanently'
  | 'store_unavailable';

/** How an execution ended: finished (response stored), released, discarded, or fenced (lease lost). */
export type ExecutionEnd = 'finished' | 'released' | 'discarded' | 'fenced';

/** The telemetry of one request, from `begin` to the end of its execution. */
export interface RequestTelemetry {
  /** The claim and decision (with any wait, protocol.md K17) took `ms` milliseconds. */
  claimed(ms: number): void;
  /** Records an outcome of this request; a request has one from `begin`, and may get one more at its end. */
  outcome(outcome: IdempotencyOutcome, attributes?: { waitedMs?: number | undefined; token?: number; cached?: boolean | undefined }): void;
  /** Runs `fn` as a child operation of the request: an atomic phase, an external call, or the finish. */
  span<T>(kind: 'phase' | 'call' | 'finish', name: string, fn: () => Promise<T>, skipped?: boolean): Promise<T>;
  /** The execution began: this request runs the work (in-flight executions count up). */
  executing(): void;
  /** The request is over: `end` says how its execution ended (undefined when it had none), `error` what failed. */
  end(end?: ExecutionEnd, error?: unknown): void;
}

/** An operator's release or forget of one key, done or refused (protocol.md K40). */
export interface OperatorEvent {
  action: 'release' | 'forget';
  scope: string;
  key: string;
  done: boolean;
  force: boolean;
  /** Done: the token read, and the key's new token. */
  token?: number;
  newToken?: number;
  /** Refused: why (`live-lease`, `started`, ...). */
  refusal?: string;
  by?: string;
  reason?: string;
}

/** A source of {@link RequestTelemetry}, given to the engine as `telemetry`. */
export interface IdempotencyTelemetry {
  /** A request for (scope, key) entered `begin` (or a completer takes a key over). */
  request(scope: string, key: string): RequestTelemetry;
  /** Optional: an operator released or forgot a key, or was refused (`idem/operator`). */
  operator?(event: OperatorEvent): void;
}
