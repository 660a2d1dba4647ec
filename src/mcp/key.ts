import { InvalidOptionError } from '../core/errors.js';
import { checkKeyFields, keyArgumentOf, type ToolKeyFields, toolKey } from '../tool-call/key.js';
import type { ToolExtra } from './types.js';

export { toolFingerprint } from '../tool-call/key.js';

/** Where a client puts its key in a `tools/call` request: `params._meta` (protocol.md K49). */
export const KEY_META = 'dev.idem/idempotency-key';

/** How a tool call's key is found (protocol.md K49). */
export interface ToolKeyOptions extends ToolKeyFields {
  /**
   * An argument of the tool that carries the caller's key (e.g. `'idempotencyKey'`, declared in
   * the `inputSchema`). Its value is the key, and it is not part of the fingerprint. The
   * request's `_meta['dev.idem/idempotency-key']` wins when both are sent.
   */
  keyArgument?: string;
  /**
   * Who calls: part of every key, so one principal never replays another's result.
   * @default the authenticated client (`extra.authInfo.clientId`); none: the one anonymous principal
   */
  principal?: (extra: ToolExtra) => string | undefined;
}

/** @throws {InvalidOptionError} for keyFields, version or keyArgument of the wrong type */
export function checkKeyOptions(options: ToolKeyOptions): void {
  checkKeyFields(options);
  if (options.principal !== undefined && typeof options.principal !== 'function') {
    throw new InvalidOptionError('idem: principal must be a function of the extra');
  }
}

/**
 * The key of one tool call (protocol.md K49): the client's (from `_meta` or the key argument),
 * else the SHA-256 of the canonical JSON (RFC 8785) of the tool's name, the version and the
 * selected arguments. Either way scoped by the principal, so two principals never share a key.
 *
 * @throws {InvalidKeyError} the client sent a key that is not a non-empty string
 */
export function toolCallKey(tool: string, args: Record<string, unknown>, extra: ToolExtra, options: ToolKeyOptions): string {
  const principal = (options.principal ?? defaultPrincipal)(extra);
  const fromMeta = extra._meta?.[KEY_META];
  const sent = fromMeta !== undefined ? fromMeta : keyArgumentOf(args, options);
  const where = `_meta["${KEY_META}"]${options.keyArgument ? ` or the argument "${options.keyArgument}"` : ''}`;
  return toolKey(tool, args, principal, sent, options, where);
}

/** The SDK's authenticated client: `authInfo.clientId`. */
function defaultPrincipal(extra: ToolExtra): string | undefined {
  return extra.authInfo?.clientId;
}
