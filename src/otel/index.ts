/**
 * `idem/otel`: OpenTelemetry traces and metrics of idempotent requests, through
 * `@opentelemetry/api` only (an optional peer dependency; no SDK here). The application
 * installs and configures an SDK; without one, the API's no-op tracer and meter cost nothing.
 * The span, attribute and metric names are in docs/observability.md.
 *
 * @example
 * ```ts
 * import { openTelemetry } from 'idem/otel';
 * const telemetry = await openTelemetry();             // global tracer and meter providers
 * app.post('/v1/charges', idempotency({ store, telemetry }), handler);
 * ```
 */
import type * as Api from '@opentelemetry/api';
import { MissingDependencyError } from '../core/errors.js';
import type { ExecutionEnd, IdempotencyOutcome, IdempotencyTelemetry, OperatorEvent, RequestTelemetry } from '../engine/telemetry.js';

export type { ExecutionEnd, IdempotencyOutcome, IdempotencyTelemetry, OperatorEvent, RequestTelemetry } from '../engine/telemetry.js';

/** The instrumentation scope name of idem's tracer and meter. */
export const INSTRUMENTATION_NAME = 'idem';

/** Options of {@link openTelemetry}. */
export interface OpenTelemetryOptions {
  /** @default the global tracer provider (`trace.getTracerProvider()`) */
  tracerProvider?: Api.TracerProvider;
  /** @default the global meter provider (`metrics.getMeterProvider()`) */
  meterProvider?: Api.MeterProvider;
  /**
   * Put the key and scope on the request span (`idem.key`, `idem.scope`). Never on metrics.
   * @default true
   */
  keyAttributes?: boolean;
}

/**
 * Loads `@opentelemetry/api` and returns the engine's `telemetry` (see {@link telemetryFrom}).
 * @throws {MissingDependencyError} when `@opentelemetry/api` is not installed
 */
export async function openTelemetry(options: OpenTelemetryOptions = {}): Promise<IdempotencyTelemetry> {
  let api: typeof Api;
  try {
    api = await import('@opentelemetry/api');
  } catch (error) {
    throw new MissingDependencyError('@opentelemetry/api', 'idem/otel', { cause: error });
  }
  return telemetryFrom(api, options);
}

/** {@link openTelemetry} with an `@opentelemetry/api` module the caller already imported. */
export function telemetryFrom(api: typeof Api, options: OpenTelemetryOptions = {}): IdempotencyTelemetry {
  const tracer = (options.tracerProvider ?? api.trace.getTracerProvider()).getTracer(INSTRUMENTATION_NAME);
  const meter = (options.meterProvider ?? api.metrics.getMeterProvider()).getMeter(INSTRUMENTATION_NAME);
  const outcomes = meter.createCounter('idem.outcomes', { description: 'Idempotent requests by outcome (docs/observability.md)', unit: '{outcome}' });
  const claimDuration = meter.createHistogram('idem.claim.duration', {
    description: 'Claim and decision of one request, including any wait for an in-progress key',
    unit: 's',
  });
  const executionDuration = meter.createHistogram('idem.execution.duration', {
    description: 'One execution, from its claim or takeover to its finish, release, discard or lost lease',
    unit: 's',
  });
  const active = meter.createUpDownCounter('idem.executions.active', { description: 'Executions in flight in this process', unit: '{execution}' });
  const keyAttributes = options.keyAttributes ?? true;
  const operatorActions = meter.createCounter('idem.operator.actions', { description: 'Operator releases and forgets, done or refused', unit: '{action}' });

  return {
    operator(event: OperatorEvent) {
      const outcome = event.done ? 'done' : `refused:${event.refusal ?? 'unknown'}`;
      operatorActions.add(1, { 'idem.operator.action': event.action, 'idem.operator.outcome': outcome });
      const attributes: Api.Attributes = {
        'idem.operator.action': event.action,
        'idem.operator.outcome': outcome,
        'idem.operator.force': event.force,
        ...(keyAttributes ? { 'idem.key': event.key, 'idem.scope': event.scope } : {}),
        ...(event.token !== undefined ? { 'idem.token': event.token, 'idem.operator.new_token': event.newToken ?? 0 } : {}),
        ...(event.by ? { 'idem.operator.by': event.by } : {}),
        ...(event.reason ? { 'idem.operator.reason': event.reason } : {}),
      };
      const span = tracer.startSpan(`idem.operator ${event.action}`, { kind: api.SpanKind.INTERNAL, attributes }, api.context.active());
      span.addEvent(`idem.operator.${event.action}`, attributes);
      span.end();
    },
    request(scope: string, key: string): RequestTelemetry {
      const parent = api.context.active();
      const span = tracer.startSpan(
        'idem.request',
        { kind: api.SpanKind.INTERNAL, attributes: keyAttributes ? { 'idem.key': key, 'idem.scope': scope } : {} },
        parent,
      );
      const inside = api.trace.setSpan(parent, span);
      let executingSince: number | undefined;
      let ended = false;
      return {
        claimed(ms) {
          claimDuration.record(ms / 1000);
          span.setAttribute('idem.claim.duration_ms', ms);
        },
        outcome(outcome: IdempotencyOutcome, attributes = {}) {
          outcomes.add(1, attributes.cached ? { 'idem.outcome': outcome, 'idem.cache_hit': true } : { 'idem.outcome': outcome });
          // The first outcome is the request's; a later one (released, fenced, failed) is its end.
          span.setAttribute(executingSince === undefined ? 'idem.outcome' : 'idem.execution.outcome', outcome);
          if (attributes.token !== undefined) span.setAttribute('idem.token', attributes.token);
          if (attributes.waitedMs !== undefined) span.setAttribute('idem.waited_ms', attributes.waitedMs);
          if (attributes.cached) span.setAttribute('idem.cache_hit', true);
        },
        executing() {
          executingSince = performance.now();
          active.add(1);
        },
        async span<T>(kind: 'phase' | 'call' | 'finish', name: string, fn: () => Promise<T>): Promise<T> {
          const child = tracer.startSpan(
            kind === 'finish' ? 'idem.finish' : `idem.${kind} ${name}`,
            { attributes: { 'idem.operation': kind, 'idem.phase': name } },
            inside,
          );
          try {
            return await api.context.with(api.trace.setSpan(inside, child), fn);
          } catch (error) {
            fail(child, error);
            throw error;
          } finally {
            child.end();
          }
        },
        end(end?: ExecutionEnd, error?: unknown) {
          if (ended) return;
          ended = true;
          if (executingSince !== undefined) {
            active.add(-1);
            executionDuration.record((performance.now() - executingSince) / 1000, { 'idem.execution.end': end ?? 'unknown' });
          }
          if (end) span.setAttribute('idem.execution.end', end);
          if (error !== undefined || end === 'fenced') fail(span, error);
          span.end();
        },
      };
    },
  };

  function fail(span: Api.Span, error: unknown): void {
    if (error instanceof Error) span.recordException(error);
    span.setStatus({ code: api.SpanStatusCode.ERROR, message: error instanceof Error ? error.message : undefined });
  }
}
