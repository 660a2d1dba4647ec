import { InvalidOptionError } from '../core/errors.js';
import { IdempotencyEngine } from '../engine/engine.js';
import type { EngineOptions } from '../engine/types.js';
import { jsonCodec, type ResultCodec } from '../function/codec.js';
import type { FunctionContext } from '../function/context.js';
import { type CallOutcome, idempotent } from '../function/idempotent.js';
import { checkKeyFields, keyArgumentOf, toolFingerprint, toolKey } from '../tool-call/key.js';

/**
 * What the AI SDK passes a tool's `execute` beside its input (`ToolExecutionOptions`), declared
 * here so idem/ai names no SDK import. `toolCallId` changes on every turn: it is never the key.
 */
export interface ToolCallOptions {
  toolCallId?: string;
  messages?: unknown[];
  abortSignal?: AbortSignal;
}

/** Options of {@link idempotentExecute}: an engine (or a store and the engine's options), the key, and the tool's policies. */
export type IdempotentExecuteOptions<I, O, C, Tx = unknown> = ({ engine: IdempotencyEngine<Tx> } | EngineOptions<Tx>) & {
  /**
   * Who calls (the signed-in user, the tenant, the conversation): part of every key, so one
   * principal never replays another's result (protocol.md K49). Required: a string when the
   * tool is made per request, a function of the call, or `null` for one principal on purpose.
   */
  principal: string | null | ((input: I, options: C) => string | null | undefined);
  /**
   * The caller's key from the call's context (e.g. a run id the app put in `options.context`):
   * it wins over `keyArgument` and the derived key. Return `undefined` to fall through.
   */
  key?: (input: I, options: C) => string | undefined;
  /** An input field that carries the key (e.g. `'requestId'`): its value is the key and it is not part of the fingerprint. */
  keyArgument?: keyof I & string;
  /**
   * The input fields a derived key is made of, with the tool's name and `version`, e.g.
   * `['orderId', 'cents']`: the fields that say what is meant, never a per-turn id.
   * @default every field
   */
  keyFields?: readonly (keyof I & string)[];
  /** Part of a derived key: bump it when the same input should mean a new call. @default '1' */
  version?: string;
  /** The scope the tool's keys live in (1-255 characters). @default `ai:<tool name>` */
  scope?: string;
  /** A call whose key another call is still running waits up to this long for its output (protocol.md K17). @default 0 */
  waitMs?: number;
  /** Failed attempts of a key (thrown, crashes) before it ends for good (protocol.md K23). @default 5 */
  maxAttempts?: number;
  /** Errors `execute` throws that are stored as the key's outcome (see `idempotent`'s `storeErrors`). @default false */
  storeErrors?: boolean | ((error: unknown) => boolean);
  /** How the output is stored and replayed. @default JSON */
  codec?: ResultCodec<O>;
};

/**
 * A tool's `execute` under idem: the framework's input and options, and the attempt's context
 * third (`ctx.phase`, `ctx.call`). The context is not typed by the output, so that TypeScript
 * infers the output from what `execute` returns.
 */
export type IdempotentExecuteFunction<I, O, C, Tx = unknown> = (input: I, options: C, ctx: FunctionContext<Tx>) => O | PromiseLike<O>;

/** The wrapped `execute`: the framework's own shape, at most once in effect per key. */
export interface IdempotentExecute<I, O, C> {
  (input: I, options?: C): Promise<O>;
  /** The same call, telling whether the output was replayed (an earlier call's, read from the store). */
  outcome(input: I, options?: C): Promise<CallOutcome<O>>;
}

const OWN_KEYS = ['principal', 'key', 'keyArgument', 'keyFields', 'version', 'scope', 'waitMs', 'maxAttempts', 'storeErrors', 'codec'] as const;

/**
 * Wraps a tool's `execute(input, options)` (the AI SDK's `tool({ execute })`, OpenAI Agents
 * JS's `tool({ execute })`, LangChain JS's `tool(fn)`) so its side effect runs once per key
 * (protocol.md K49), on `idempotent(fn)`.
 *
 * - The key: `key(input, options)`, else the `keyArgument` field, else derived from the tool's
 *   name, `version` and the `keyFields`. Always scoped by the `principal`. Never `toolCallId`.
 * - A replay (the model re-emits the call in a later turn): the stored output, `execute` not run.
 * - Same key, other input: throws `KeyMismatchError` (`IDEM_KEY_MISMATCH`); a call still running:
 *   `KeyInProgressError` (`IDEM_KEY_IN_PROGRESS`, `retryAfterMs`). The frameworks hand a thrown
 *   error to the model as the tool's error output.
 * - An output the codec cannot encode (a bigint, a stream): stored as a failure, never run again.
 *
 * @throws {InvalidOptionError} at creation for bad options
 */
export function idempotentExecute<I extends Record<string, unknown>, O, C = ToolCallOptions, Tx = unknown>(
  name: string,
  execute: IdempotentExecuteFunction<I, O, C, Tx>,
  options: IdempotentExecuteOptions<I, O, C, Tx>,
): IdempotentExecute<I, O, C> {
  if (typeof name !== 'string' || name.length === 0) throw new InvalidOptionError('idem: a tool needs a name');
  if (typeof execute !== 'function') throw new InvalidOptionError('idem: idempotentExecute needs an execute function');
  if (!options) throw new InvalidOptionError('idem: idempotentExecute needs options { store, principal } or { engine, principal }');
  checkKeyFields(options);
  const { principal, key } = options;
  if (principal === undefined) {
    throw new InvalidOptionError('idem: idempotentExecute needs a principal (the user or conversation the call is for, or null for one principal)');
  }
  if (!(principal === null || typeof principal === 'string' || typeof principal === 'function')) {
    throw new InvalidOptionError('idem: principal must be a string, null or a function of the call');
  }
  if (key !== undefined && typeof key !== 'function') throw new InvalidOptionError('idem: key must be a function of the call');

  const fn = idempotent<[I, C], O, Tx>(async (ctx, input, callOptions) => await execute(input, callOptions, ctx), {
    engine: 'engine' in options ? options.engine : new IdempotencyEngine<Tx>(engineOptions(options)),
    name: options.scope ?? `ai:${name}`,
    // protocol.md K2: the input alone (never the per-turn options), less the key field.
    fingerprint: (input) => toolFingerprint(input, options),
    codec: noStreams(options.codec ?? jsonCodec<O>()),
    waitMs: options.waitMs,
    maxAttempts: options.maxAttempts,
    storeErrors: options.storeErrors,
  });
  const outcome = (input: I, callOptions?: C): Promise<CallOutcome<O>> => {
    const args = (input ?? {}) as I;
    const opts = (callOptions ?? {}) as C;
    const who = typeof principal === 'function' ? principal(args, opts) : principal;
    const sent = key?.(args, opts) ?? keyArgumentOf(args, options);
    const where = options.keyArgument ? `the key option or the input field "${options.keyArgument}"` : 'the key option';
    return fn.outcome({ key: toolKey(name, args, who, sent, options, where) }, args, opts);
  };
  return Object.assign((input: I, callOptions?: C) => outcome(input, callOptions).then((o) => o.value), { outcome });
}

/** A streamed output (an async iterable) cannot be replayed: refuse it at encode, so it is stored as a failure (fail closed, protocol.md K46). */
function noStreams<O>(codec: ResultCodec<O>): ResultCodec<O> {
  return {
    contentType: codec.contentType,
    decode: (bytes) => codec.decode(bytes),
    encode: (value) => {
      if (value !== null && typeof value === 'object' && Symbol.asyncIterator in value) {
        throw new TypeError('a streamed (async iterable) output cannot be stored; return the final output');
      }
      return codec.encode(value);
    },
  };
}

function engineOptions<I, O, C, Tx>(options: IdempotentExecuteOptions<I, O, C, Tx>): EngineOptions<Tx> {
  const rest: Record<string, unknown> = { ...options };
  for (const k of OWN_KEYS) delete rest[k];
  return rest as unknown as EngineOptions<Tx>;
}
