/**
 * `idem/ai`: agent tools whose side effect runs once per key, for the Vercel AI SDK's
 * `tool({ execute })`, OpenAI Agents JS's `tool({ execute })` and LangChain JS's `tool(fn)`
 * (protocol.md K49). The key is the user's intent, never the per-turn `toolCallId`; a call the
 * model re-emits in a later turn returns the stored output. See docs/guides/ai-sdk.md.
 */
export {
  idempotentExecute,
  type IdempotentExecute,
  type IdempotentExecuteFunction,
  type IdempotentExecuteOptions,
  type ToolCallOptions,
} from './execute.js';
export { IdempotencyError } from '../core/errors.js';
export { FunctionContext } from '../function/context.js';
export { KeyInProgressError, KeyMismatchError, StoredFailureError } from '../function/errors.js';
