import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import { ErrorCode, IdempotencyError, InvalidOptionError, UnencodableResultError } from '../core/errors.js';
import { Attempt, type AttemptPolicy, runAttempt } from '../engine/attempt.js';
import { dataKey } from '../core/data-key.js';
import { fingerprint } from '../core/fingerprint.js';
import { type EngineOptions, IdempotencyEngine } from '../engine/engine.js';
import type { Execution } from '../engine/execution.js';
import type { StoredResponse } from '../store/types.js';
import { FAILURE_STATUS, failureRecord, jsonCodec, readFailure, type ResultCodec, resultRecord } from './codec.js';
import { attemptValue, FunctionContext } from './context.js';
import { KeyInProgressError, KeyMismatchError, StoredFailureError } from './errors.js';

/** Options of {@link idempotent}: an engine (or a store and the engine's options) and the function's own. */
export type FunctionOptions<A extends unknown[], R, Tx = unknown> = ({ engine: IdempotencyEngine<Tx> } | EngineOptions<Tx>) & {
  /** The scope the function's keys live in, e.g. `'nightly-invoices'`: 1-255 characters. */
  name: string;
  /**
   * The key of a call: a function of the arguments (e.g. `(order) => order.id`), or one fixed
   * key. A call may also give its own with {@link IdempotentFunction.withKey}. Any non-empty
   * string (`Straße`, an emoji, a composite key over 255 characters): one outside 1-255 printable
   * ASCII is stored as `sha256:<hex>` of it (protocol.md K47); an empty one or a non-string
   * throws `InvalidKeyError` and nothing runs.
   * @default SHA-256 (hex) of the arguments' canonical JSON (RFC 8785)
   */
  key?: string | NoInfer<(...args: A) => string>;
  /**
   * What of the arguments must be the same for the same key (protocol.md K2): another value
   * with a used key throws {@link KeyMismatchError} and the function does not run.
   * @default all the arguments, as canonical JSON
   */
  fingerprint?: NoInfer<(...args: A) => unknown>;
  /**
   * How the result is stored and replayed.
   * @default JSON ({@link jsonCodec})
   */
  codec?: ResultCodec<R>;
  /**
   * Errors the function throws are not stored by default: the lease is released with the
   * recovery point kept (protocol.md K10) and the next call with the key runs again, after the
   * committed phases. `true` (or a predicate returning true for an error) stores the failure
   * instead: later calls throw {@link StoredFailureError} and never run the function again
   * (a card declined, a validation that will not change). idem's own errors (a lost lease, an
   * unreachable store) are never stored.
   * @default false
   */
  storeErrors?: boolean | ((error: unknown) => boolean);
  /**
   * How long, in ms, a call waits for another caller holding the key to finish and then
   * returns its result (protocol.md K17), instead of throwing {@link KeyInProgressError} at
   * once. Needs a store that can wake waiters (`subscribe`); at most the lease.
   * @default 0
   */
  waitMs?: number;
  /**
   * A key whose calls failed this many times does not run `fn` again (protocol.md K5, K23):
   * throws that would repeat (not idem's retryable errors, not errors marked `transient: true`)
   * and processes that died inside `fn` (each counted when the next call takes its lease over)
   * both count. The last one finishes the key with a stored failure (code
   * `IDEM_FAILED_PERMANENTLY`) that every later call throws as {@link StoredFailureError}; the
   * call whose throw was the last gets it too, with its own error as `cause`. `Infinity` turns it off.
   * @default 5
   */
  maxAttempts?: number;
};

/** How a call ended: the function ran (or resumed) here, or an earlier call's result was returned. */
export interface CallOutcome<R> {
  value: R;
  /** True when the result is an earlier call's, read from the store; the function did not run. */
  replayed: boolean;
}

/** The wrapped function: the same arguments and result, at most once in effect per key. */
export interface IdempotentFunction<A extends unknown[], R> {
  (...args: A): Promise<R>;
  /** The same function with its key given by the caller (a job id, a command id). */
  withKey(key: string): (...args: A) => Promise<R>;
  /** Calls it and tells whether the result was replayed. `key` overrides the options' key. */
  outcome(call: { key?: string }, ...args: A): Promise<CallOutcome<R>>;
  /** The engine the calls go through. */
  readonly engine: IdempotencyEngine<unknown>;
}

/**
 * Wraps `fn` so that each key runs it at most once in effect (protocol.md K3-K5, as any
 * execution, protocol.md K36): the first call claims the key, `fn` commits its effects in atomic phases through
 * its context (`ctx.phase`, `ctx.call`, `ctx.complete`), and its result is stored with the
 * key; every later call with the key returns that result as a value without running `fn`. A
 * call that crashed or threw is resumed by the next one after its last committed phase.
 *
 * @example
 * ```ts
 * const sendInvoice = idempotent(
 *   async (ctx, order: Order) => {
 *     const invoice = await ctx.phase('invoice', (tx) => insertInvoice(tx, order));
 *     await ctx.call('email', (key) => mailer.send(invoice, { idempotencyKey: key }));
 *     return { invoiceId: invoice.id };
 *   },
 *   { store, name: 'send-invoice', key: (order) => order.id },
 * );
 * const { invoiceId } = await sendInvoice(order); // a second call returns the same, sends nothing
 * ```
 *
 * @throws {InvalidOptionError} at creation for bad options
 * @returns a function of the same arguments that throws {@link KeyMismatchError},
 *   {@link KeyInProgressError}, {@link StoredFailureError}, `StoreUnavailableError` (nothing
 *   ran), `LeaseLostError` (another caller took over) or what `fn` threw
 */
export function idempotent<A extends unknown[], R, Tx = unknown>(
  fn: (ctx: FunctionContext<Tx, R>, ...args: A) => Promise<R>,
  options: FunctionOptions<A, R, Tx>,
): IdempotentFunction<A, R> {
  if (typeof fn !== 'function') throw new InvalidOptionError('idem: idempotent(fn, options) needs a function');
  if (!options) throw new InvalidOptionError('idem: idempotent(fn, options) needs options { store, name }');
  const engine = 'engine' in options ? options.engine : new IdempotencyEngine<Tx>(options);
  const scope = options.name;
  if (typeof scope !== 'string' || scope.length === 0 || scope.length > 255) {
    throw new InvalidOptionError('idem: `name` (the scope of the function’s keys) must be a string of 1-255 characters');
  }
  const codec = options.codec ?? jsonCodec<R>();
  if (typeof codec.encode !== 'function' || typeof codec.decode !== 'function') throw new InvalidOptionError('idem: `codec` needs encode and decode');
  const keyOption = options.key;
  const keyOf = typeof keyOption === 'function' ? keyOption : typeof keyOption === 'string' ? () => keyOption : (...args: A) => hashOf(args);
  const printOf = options.fingerprint ?? ((...args: A) => args);
  const storeError = options.storeErrors;
  const keeps = typeof storeError === 'function' ? storeError : () => storeError === true;
  const waitMs = options.waitMs ?? 0;
  if (!(Number.isFinite(waitMs) && waitMs >= 0)) throw new InvalidOptionError('idem: waitMs must be a number of ms >= 0');

  const maxAttempts = options.maxAttempts ?? 5;
  if (!(maxAttempts >= 1)) throw new InvalidOptionError('idem: maxAttempts must be >= 1');

  const outcome = async (call: { key?: string }, ...args: A): Promise<CallOutcome<R>> => {
    // protocol.md K47: a key from data, any string, mapped into the stored keys.
    const key = dataKey(call.key ?? keyOf(...args));
    const print = fingerprint({ method: 'FUNCTION', path: scope, contentType: 'application/json', body: canonicalBytes(printOf(...args)) });
    const begun = await engine.begin({ scope, key, fingerprint: print, waitMs });
    switch (begun.kind) {
      case 'mismatch':
        throw new KeyMismatchError(scope, key);
      case 'in-progress':
        throw new KeyInProgressError(scope, key, begun.retryAfterMs);
      case 'replay':
        return { value: replayed(codec, begun.response), replayed: true };
      case 'execute':
        return { value: await run(begun.execution, args), replayed: false };
    }
  };

  // One policy for every call (protocol.md K5, K23): a throw that counts is released until the
  // last allowed attempt, which stores the permanent failure; `storeErrors` keeps a failure at once.
  const policy: AttemptPolicy<Tx> = {
    maxAttempts,
    storeFailure: (error) => (!(error instanceof IdempotencyError) && keeps(error) ? failureRecord(error) : undefined),
    // A result the codec cannot encode ends the key at once (K46): stored as the failure itself.
    exhausted: (failed, _execution, error) =>
      error instanceof UnencodableResultError
        ? failureRecord(error)
        : failureRecord({
            name: 'IdempotencyError',
            code: ErrorCode.FailedPermanently,
            message: `the function failed ${failed} times with this key (thrown or its process ended)`,
          }),
  };

  /** One attempt through the engine; this translates how it ended into the value or the error. */
  async function run(execution: Execution<Tx>, args: A): Promise<R> {
    const ctx = new FunctionContext<Tx, R>(execution, codec);
    const end = await runAttempt(new Attempt(execution, policy), async () => {
      const value = await fn(ctx, ...args);
      if (ctx.completed) return execution.stored!;
      try {
        return resultRecord(codec, value);
      } catch (error) {
        // A result the codec cannot encode (a bigint or a cycle under JSON): fn's effects ran, so
        // the key is not freed for a rerun; the failure is stored for every call (protocol.md K36, K46).
        throw new UnencodableResultError(`idem: the result of ${scope} cannot be encoded by its codec: ${(error as Error)?.message ?? String(error)}`, {
          cause: error,
        });
      }
    });
    return attemptValue(end, ctx, codec);
  }

  const call = (...args: A) => outcome({}, ...args).then((o) => o.value);
  return Object.assign(call, {
    withKey:
      (key: string) =>
      (...args: A) =>
        outcome({ key }, ...args).then((o) => o.value),
    outcome,
    engine: engine as IdempotencyEngine<unknown>,
  });
}

function replayed<R>(codec: ResultCodec<R>, response: StoredResponse): R {
  if (response.status === FAILURE_STATUS) throw new StoredFailureError(readFailure(response));
  return codec.decode(response.body);
}

function canonicalBytes(value: unknown): Uint8Array {
  return new TextEncoder().encode(canonicalize(value === undefined ? null : value) ?? 'null');
}

/** The default key: SHA-256 of the arguments' canonical JSON, 64 hex characters. */
function hashOf(args: unknown[]): string {
  return createHash('sha256').update(canonicalBytes(args)).digest('hex');
}
