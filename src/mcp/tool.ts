import { IdempotencyError, InvalidOptionError } from '../core/errors.js';
import { IdempotencyEngine } from '../engine/engine.js';
import type { EngineOptions } from '../engine/types.js';
import { jsonCodec } from '../function/codec.js';
import type { FunctionContext } from '../function/context.js';
import { idempotent } from '../function/idempotent.js';
import { checkKeyOptions, type ToolKeyOptions, toolCallKey, toolFingerprint } from './key.js';
import { idemErrorResult, replayedResult, unencodableResult } from './results.js';
import type { CallToolResult, ToolArgs, ToolConfig, ToolExtra, ToolServer } from './types.js';

/** Options of {@link idempotentTool}: an engine (or a store and the engine's options), the key, and the tool's policies. */
export type IdempotentToolOptions<Tx = unknown> = ({ engine: IdempotencyEngine<Tx> } | EngineOptions<Tx>) &
  ToolKeyOptions & {
    /** The scope the tool's keys live in (1-255 characters). @default `mcp:<tool name>` */
    scope?: string;
    /**
     * A call with a key that another call is still running waits up to this long for its result
     * (protocol.md K17) instead of answering at once with an error result that says when to
     * retry (`_meta['dev.idem/retry-after-ms']`). Needs a store that can wake waiters.
     * @default 0
     */
    waitMs?: number;
    /**
     * What happens to a result the tool returns with `isError: true`:
     * - `'store'`: it is the key's outcome, replayed to every retry (the tool ran and answered;
     *   a declined card stays declined);
     * - `'release'`: it is returned but not stored; the key is released with its committed
     *   phases kept and the next call with it runs the tool again. It counts as a failed attempt
     *   toward `maxAttempts`, as a thrown error does.
     *
     * A function decides per result. Thrown errors are never stored: the SDK answers them as error
     * results, and they follow `maxAttempts`.
     * @default 'store'
     */
    errorResults?: 'store' | 'release' | ((result: CallToolResult) => 'store' | 'release');
    /** Failed attempts of a key (thrown, released error results, crashes) before it ends for good (protocol.md K23). @default 5 */
    maxAttempts?: number;
  };

/**
 * A tool's handler under idem: the SDK's arguments and extra, and the attempt's context
 * third (`ctx.phase`, `ctx.call`, `ctx.derivedKey`) for effects that must commit once.
 */
export type IdempotentToolHandler<A, Tx = unknown> = (
  args: A,
  extra: ToolExtra,
  ctx: FunctionContext<Tx, CallToolResult>,
) => CallToolResult | Promise<CallToolResult>;

/**
 * The callback `registerTool` gets: `(args, extra)`, or `(extra)` for a tool without
 * `inputSchema`. It resolves to a {@link CallToolResult}; typed loosely so that it fits the
 * SDK's own `CallToolResult` type, which idem does not import.
 */
// biome-ignore lint/suspicious/noExplicitAny: the SDK's result type is not ours to name (see above)
export type ToolCallback<A> = (args: A, extra: ToolExtra) => Promise<any>;

/** Thrown out of the attempt to release it: the tool's error result, returned to this call alone. */
class ReleasedResult extends Error {
  constructor(readonly result: CallToolResult) {
    super('the tool returned an error result (released)');
  }
}

const ENGINE_KEYS = ['scope', 'keyFields', 'version', 'keyArgument', 'principal', 'waitMs', 'errorResults', 'maxAttempts'] as const;

/**
 * Wraps a tool handler so its side effect runs once per key (protocol.md K49): give the result
 * to `server.registerTool(name, config, …)` yourself (and set `annotations.idempotentHint`),
 * or use {@link idempotentTool}, which does both.
 *
 * - The key: `_meta['dev.idem/idempotency-key']` of the request, or the `keyArgument`; else
 *   derived from the tool's name, `version` and the `keyFields` arguments. Always scoped by the
 *   principal (`authInfo.clientId`).
 * - Same key, other arguments: an error result, code `IDEM_KEY_MISMATCH`; the tool does not run.
 * - A replay: the stored result as it was, `_meta['dev.idem/replayed']: true`.
 * - A call still running: an error result, code `IDEM_KEY_IN_PROGRESS`, with
 *   `_meta['dev.idem/retry-after-ms']`, or its result after `waitMs`.
 * - A result JSON cannot encode: an error result is stored in its place (code
 *   `IDEM_TOOL_RESULT_UNENCODABLE`); the tool never runs again with that key.
 *
 * @throws {InvalidOptionError} at creation for bad options
 */
export function idempotentToolHandler<A extends Record<string, unknown>, Tx = unknown>(
  name: string,
  handler: IdempotentToolHandler<A, Tx>,
  options: IdempotentToolOptions<Tx>,
): ToolCallback<A> {
  if (typeof name !== 'string' || name.length === 0) throw new InvalidOptionError('idem: a tool needs a name');
  if (typeof handler !== 'function') throw new InvalidOptionError('idem: idempotentTool needs a handler function');
  if (!options) throw new InvalidOptionError('idem: idempotentTool needs options { store } or { engine }');
  checkKeyOptions(options);
  const errorResults = options.errorResults ?? 'store';
  if (!(errorResults === 'store' || errorResults === 'release' || typeof errorResults === 'function')) {
    throw new InvalidOptionError("idem: errorResults must be 'store', 'release' or a function returning one");
  }
  const releases = (result: CallToolResult) => (typeof errorResults === 'function' ? errorResults(result) : errorResults) === 'release';

  const fn = idempotent<[A, ToolExtra], CallToolResult, Tx>(
    async (ctx, args, extra) => {
      const result = await handler(args, extra, ctx);
      try {
        JSON.stringify(result);
      } catch (error) {
        // Fail closed (protocol.md K49): the effect happened, so the key is finished, but with
        // an error result in place of the one JSON cannot hold; no retry runs the tool again.
        return unencodableResult(error);
      }
      if (result?.isError === true && releases(result)) throw new ReleasedResult(result);
      return result;
    },
    {
      engine: 'engine' in options ? options.engine : new IdempotencyEngine<Tx>(engineOptions(options)),
      name: options.scope ?? `mcp:${name}`,
      fingerprint: (args) => toolFingerprint(args, options),
      codec: jsonCodec<CallToolResult>(),
      waitMs: options.waitMs,
      maxAttempts: options.maxAttempts,
    },
  );
  return async (...params: unknown[]) => {
    // The SDK calls `(args, extra)`, or `(extra)` when the tool has no inputSchema.
    const [args, extra] = (params.length >= 2 ? params : [{}, params[0]]) as [A, ToolExtra];
    try {
      const key = toolCallKey(name, args ?? {}, extra ?? {}, options);
      const outcome = await fn.outcome({ key }, args ?? ({} as A), extra ?? {});
      return outcome.replayed ? replayedResult(outcome.value) : outcome.value;
    } catch (error) {
      if (error instanceof ReleasedResult) return error.result;
      if (error instanceof IdempotencyError) return idemErrorResult(error);
      throw error; // the tool's own error: the SDK answers it as an error result
    }
  };
}

/**
 * Registers a tool whose side effect runs once per key (protocol.md K49): `server.registerTool`
 * with the handler wrapped by {@link idempotentToolHandler} and `annotations.idempotentHint: true`
 * (unless the config sets it).
 *
 * @example
 * ```ts
 * idempotentTool(server, 'create_refund', { inputSchema: { orderId: z.string(), cents: z.number() } },
 *   async ({ orderId, cents }, _extra, ctx) => {
 *     const refund = await ctx.phase('refund', (tx) => insertRefund(tx, orderId, cents));
 *     return { content: [{ type: 'text', text: `refund ${refund.id}` }] };
 *   },
 *   { engine, keyFields: ['orderId'] });
 * ```
 * @returns what `registerTool` returns (the SDK's `RegisteredTool`)
 */
export function idempotentTool<S, R, Tx = unknown>(
  server: ToolServer<R>,
  name: string,
  config: ToolConfig<S>,
  handler: IdempotentToolHandler<ToolArgs<S>, Tx>,
  options: IdempotentToolOptions<Tx>,
): R {
  if (!server || typeof server.registerTool !== 'function') throw new InvalidOptionError('idem: idempotentTool needs an McpServer');
  const callback = idempotentToolHandler(name, handler as IdempotentToolHandler<Record<string, unknown>, Tx>, options);
  const annotations = { idempotentHint: true, ...config?.annotations };
  return server.registerTool(name, { ...config, annotations }, callback);
}

function engineOptions<Tx>(options: IdempotentToolOptions<Tx>): EngineOptions<Tx> {
  const rest: Record<string, unknown> = { ...options };
  for (const k of ENGINE_KEYS) delete rest[k];
  return rest as unknown as EngineOptions<Tx>;
}
