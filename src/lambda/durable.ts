/**
 * Lambda durable functions (`@aws/durable-execution-sdk-js`, an optional peer; only the slice
 * below is used, declared here): one key per durable execution's input, held by that execution
 * across its replays (protocol.md K54).
 *
 * A durable function's handler runs again from its start after every `context.wait()` and every
 * resume, with the same event. The claim is made inside a durable step (`idem-claim-<n>`), so a
 * replay reads the claim's token and claim id from the execution's checkpoint and resumes its
 * own claim ({@link IdempotencyEngine.resume}) instead of meeting it as a duplicate. Another
 * execution with the same key has no such checkpoint: it is a duplicate (a replay of the stored
 * result, {@link KeyInProgressError} while the first runs, {@link KeyMismatchError} for another
 * input), as for any idempotent function (protocol.md K36).
 */
import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import { dataKey } from '../core/data-key.js';
import { ErrorCode, InvalidOptionError } from '../core/errors.js';
import { fingerprint } from '../core/fingerprint.js';
import { Attempt, type AttemptPolicy, runAttempt } from '../engine/attempt.js';
import { type EngineOptions, IdempotencyEngine } from '../engine/engine.js';
import type { Execution } from '../engine/execution.js';
import { FAILURE_STATUS, failureRecord, jsonCodec, readFailure, type ResultCodec, resultRecord } from '../function/codec.js';
import { attemptValue, FunctionContext } from '../function/context.js';
import { KeyInProgressError, KeyMismatchError, StoredFailureError } from '../function/errors.js';
import type { StoredResponse } from '../store/types.js';
import { invocationLeaseMs, type LambdaContextLike } from './invocation.js';

/** The slice of the durable SDK's `DurableContext` used here (`@aws/durable-execution-sdk-js` 2.x). */
export interface DurableContextLike {
  /** The execution's identity: the same on every replay of one execution, another for every execution. */
  readonly executionContext: { readonly durableExecutionArn: string };
  /** The invocation's Lambda context. */
  readonly lambdaContext?: LambdaContextLike | undefined;
  /** A checkpointed step: run once per execution; a replay returns its recorded result. */
  step<T>(name: string, fn: () => Promise<T>): PromiseLike<T>;
  /** A durable wait: the invocation ends, and the execution is replayed after it. */
  wait(name: string, duration: { seconds: number }): PromiseLike<void>;
}

/** Options of {@link withDurableIdempotency}: an engine (or a store and the engine's options) and the function's own. */
export type DurableIdempotencyOptions<E, R, Tx = unknown> = ({ engine: IdempotencyEngine<Tx> } | EngineOptions<Tx>) & {
  /** The scope of the keys, e.g. the function's name: 1-255 characters. */
  name: string;
  /**
   * The key of an execution's input, e.g. `(event) => event.orderId`: any non-empty string
   * (protocol.md K47).
   * @default SHA-256 (hex) of the event's canonical JSON (RFC 8785)
   */
  key?: (event: E) => string;
  /**
   * What of the event must be the same for the same key (protocol.md K2).
   * @default the whole event, as canonical JSON
   */
  fingerprint?: (event: E) => unknown;
  /** How the result is stored and replayed. @default JSON */
  codec?: ResultCodec<R>;
  /**
   * How long one execution holds its key once its claim is checkpointed, in ms: across its
   * waits and resumes, a second execution with the key is a duplicate this long. Set it to the
   * durable function's execution timeout (`ExecutionTimeout`), with the engine's `retentionMs`
   * above it. Every phase commit renews it.
   * @default half the engine's retentionMs (12 h with the defaults)
   */
  executionLeaseMs?: number;
  /**
   * How many times a duplicate execution waits (a durable `context.wait`, no compute billed)
   * for the execution holding the key, then asks again, before it throws
   * {@link KeyInProgressError}. Each wait lasts what the holder's lease has left (at least 1 s,
   * at most `maxInProgressWaitSeconds`).
   * @default 0 (throw at once)
   */
  inProgressWaits?: number;
  /** The longest of those waits, in seconds. @default 300 */
  maxInProgressWaitSeconds?: number;
  /** As {@link FunctionOptions} `maxAttempts` (protocol.md K23). @default 5 */
  maxAttempts?: number;
};

/** A durable handler with idem's context as its third argument. */
export type DurableIdempotentHandler<E, C extends DurableContextLike, R, Tx> = (event: E, context: C, idem: FunctionContext<Tx, R>) => Promise<R>;

/** What the claim step checkpoints: JSON, read back on every replay of the execution. */
type ClaimStep =
  | { kind: 'claimed'; token: number; claimId: string }
  | { kind: 'replay'; status: number; body: string }
  | { kind: 'mismatch' }
  | { kind: 'in-progress'; retryAfterMs: number };

/**
 * Wraps a durable handler: `withDurableExecution(withDurableIdempotency(options, handler))`.
 * The first invocation of an execution claims the key inside a durable step and checkpoints
 * the claim; every replay of the same execution (after a wait, after a crash) resumes that
 * claim after its last committed phase, with the same derived keys (protocol.md K54). The
 * handler's result is stored with the key; a second execution with the key returns it
 * without running the handler.
 *
 * @throws {InvalidOptionError} at creation for bad options
 * @returns a durable handler that throws {@link KeyMismatchError}, {@link KeyInProgressError},
 *   {@link StoredFailureError}, `StoreUnavailableError`, `LeaseLostError` or what the handler threw
 */
export function withDurableIdempotency<E = unknown, R = unknown, Tx = unknown, C extends DurableContextLike = DurableContextLike>(
  options: DurableIdempotencyOptions<E, R, Tx>,
  handler: DurableIdempotentHandler<E, C, R, Tx>,
): (event: E, context: C) => Promise<R> {
  if (typeof handler !== 'function') throw new InvalidOptionError('idem: withDurableIdempotency(options, handler) needs a handler');
  const engine = 'engine' in options ? options.engine : new IdempotencyEngine<Tx>(options);
  const scope = options.name;
  if (typeof scope !== 'string' || scope.length === 0 || scope.length > 255) {
    throw new InvalidOptionError('idem: `name` (the scope of the keys) must be a string of 1-255 characters');
  }
  const codec = options.codec ?? jsonCodec<R>();
  const keyOf = options.key ?? ((event: E) => hashOf(event));
  const printOf = options.fingerprint ?? ((event: E) => event);
  const executionLeaseMs = options.executionLeaseMs ?? Math.floor(engine.retentionMs / 2);
  if (!(Number.isFinite(executionLeaseMs) && executionLeaseMs >= 1 && executionLeaseMs < engine.retentionMs)) {
    throw new InvalidOptionError('idem: executionLeaseMs must be a number of ms from 1 to below the engine’s retentionMs');
  }
  const waits = options.inProgressWaits ?? 0;
  if (!(Number.isInteger(waits) && waits >= 0)) throw new InvalidOptionError('idem: inProgressWaits must be a whole number >= 0');
  const maxWaitSeconds = options.maxInProgressWaitSeconds ?? 300;
  if (!(Number.isFinite(maxWaitSeconds) && maxWaitSeconds >= 1)) throw new InvalidOptionError('idem: maxInProgressWaitSeconds must be >= 1');
  const maxAttempts = options.maxAttempts ?? 5;
  if (!(maxAttempts >= 1)) throw new InvalidOptionError('idem: maxAttempts must be >= 1');

  const policy: AttemptPolicy<Tx> = {
    maxAttempts,
    exhausted: (failed) =>
      failureRecord({ name: 'IdempotencyError', code: ErrorCode.FailedPermanently, message: `the durable function failed ${failed} times with this key` }),
  };

  return async function durableIdempotentHandler(event, context) {
    const key = dataKey(keyOf(event));
    const print = fingerprint({ method: 'FUNCTION', path: scope, contentType: 'application/json', body: canonicalBytes(printOf(event)) });
    for (let turn = 0; ; turn++) {
      // protocol.md K54: the claim is a checkpointed step, so every replay reads the same decision.
      const claim = await context.step(`idem-claim-${turn}`, async (): Promise<ClaimStep> => {
        const remaining = context.lambdaContext?.getRemainingTimeInMillis?.();
        // Until the step is checkpointed, the key is held for this invocation only: a crash
        // before the checkpoint frees it when the invocation is over (protocol.md K26).
        const leaseMs = remaining !== undefined && Number.isFinite(remaining) ? Math.min(invocationLeaseMs(remaining, 1000), executionLeaseMs) : undefined;
        const begun = await engine.begin({ scope, key, fingerprint: print, leaseMs });
        switch (begun.kind) {
          case 'execute':
            return { kind: 'claimed', token: begun.execution.token, claimId: begun.execution.claimId };
          case 'replay':
            return { kind: 'replay', status: begun.response.status, body: Buffer.from(begun.response.body).toString('base64') };
          case 'mismatch':
            return { kind: 'mismatch' };
          case 'in-progress':
            return { kind: 'in-progress', retryAfterMs: begun.retryAfterMs };
        }
      });
      switch (claim.kind) {
        case 'mismatch':
          throw new KeyMismatchError(scope, key);
        case 'replay':
          return replayed(codec, { status: claim.status, headers: [], body: new Uint8Array(Buffer.from(claim.body, 'base64')) });
        case 'in-progress':
          if (turn >= waits) throw new KeyInProgressError(scope, key, claim.retryAfterMs);
          await context.wait(`idem-wait-${turn}`, { seconds: Math.min(maxWaitSeconds, Math.max(1, Math.ceil(claim.retryAfterMs / 1000))) });
          continue;
        case 'claimed': {
          // This execution's own claim (the first invocation or any replay): resumed, never a duplicate.
          const execution = await engine.resume({ scope, key, token: claim.token, claimId: claim.claimId }, print, executionLeaseMs);
          if (execution) return run(execution, event, context);
          // Not held any more under the checkpointed token: finished (a crash after the finish),
          // or taken over after the lease ran out. Decided as any call.
          const begun = await engine.begin({ scope, key, fingerprint: print, leaseMs: executionLeaseMs });
          if (begun.kind === 'replay') return replayed(codec, begun.response);
          if (begun.kind === 'mismatch') throw new KeyMismatchError(scope, key);
          if (begun.kind === 'in-progress') throw new KeyInProgressError(scope, key, begun.retryAfterMs);
          return run(begun.execution, event, context);
        }
      }
    }
  };

  async function run(execution: Execution<Tx>, event: E, context: C): Promise<R> {
    const idem = new FunctionContext<Tx, R>(execution, codec);
    const end = await runAttempt(new Attempt(execution, policy), async () => {
      const value = await handler(event, context, idem);
      return idem.completed ? execution.stored! : resultRecord(codec, value);
    });
    return attemptValue(end, idem, codec);
  }
}

function replayed<R>(codec: ResultCodec<R>, response: StoredResponse): R {
  if (response.status === FAILURE_STATUS) throw new StoredFailureError(readFailure(response));
  return codec.decode(response.body);
}

function canonicalBytes(value: unknown): Uint8Array {
  return new TextEncoder().encode(canonicalize(value === undefined ? null : value) ?? 'null');
}

function hashOf(value: unknown): string {
  return createHash('sha256').update(canonicalBytes(value)).digest('hex');
}
