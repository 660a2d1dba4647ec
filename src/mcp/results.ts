import type { IdempotencyError } from '../core/errors.js';
import { KeyInProgressError, StoredFailureError } from '../function/errors.js';
import type { CallToolResult } from './types.js';

/** `_meta` of a replayed result: `true` (protocol.md K49). */
export const REPLAYED_META = 'dev.idem/replayed';
/** `_meta` of an error result idem answers: its stable code, e.g. `IDEM_KEY_MISMATCH`. */
export const CODE_META = 'dev.idem/code';
/** `_meta` of an in-progress answer: when to call again, in ms. */
export const RETRY_AFTER_META = 'dev.idem/retry-after-ms';

/** The code of a stored error result for a tool result the JSON codec cannot encode (protocol.md K49). */
export const RESULT_UNENCODABLE = 'IDEM_TOOL_RESULT_UNENCODABLE';

/** A replay: the stored result as it was, with the replay marker added to its `_meta`. */
export function replayedResult(stored: CallToolResult): CallToolResult {
  return { ...stored, _meta: { ...stored._meta, [REPLAYED_META]: true } };
}

/**
 * A tool error result for an idem outcome that is not the tool's own (a mismatch, a call in
 * progress, a stored failure, a lost lease): the model reads the text, a client the code.
 */
export function idemErrorResult(error: IdempotencyError): CallToolResult {
  const meta: Record<string, unknown> = { [CODE_META]: error.code };
  if (error instanceof StoredFailureError && error.failure.code !== undefined) meta[CODE_META] = String(error.failure.code);
  if (error instanceof KeyInProgressError) meta[RETRY_AFTER_META] = error.retryAfterMs;
  const text = error instanceof KeyInProgressError ? `${error.message}. Call the tool again with the same key then; it will not run twice.` : error.message;
  return { content: [{ type: 'text', text }], isError: true, _meta: meta };
}

/**
 * What is stored in place of a result the codec cannot encode (a bigint, a cycle): the tool
 * ran, so the key must not run it again, and the result itself is not kept (fail closed).
 */
export function unencodableResult(error: unknown): CallToolResult {
  const why = error instanceof Error ? error.message : String(error);
  return {
    content: [
      {
        type: 'text',
        text: `idem: the tool ran but its result could not be stored as JSON (${why}); it will not run again with this key`,
      },
    ],
    isError: true,
    _meta: { [CODE_META]: RESULT_UNENCODABLE },
  };
}
