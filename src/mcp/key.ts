import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import { InvalidKeyError, InvalidOptionError } from '../core/errors.js';
import type { ToolExtra } from './types.js';

/** Where a client puts its key in a `tools/call` request: `params._meta` (protocol.md K48). */
export const KEY_META = 'dev.idem/idempotency-key';

/** How a tool call's key is found (protocol.md K48). */
export interface ToolKeyOptions {
  /**
   * The arguments a derived key is made of (when the call sends no key): the tool's name, the
   * version and these arguments' values, e.g. `['orderId', 'amount']`. Name the arguments that
   * say what the call is meant to do, never a per-turn id.
   * @default every argument
   */
  keyFields?: readonly string[];
  /** Part of a derived key: bump it when the same arguments should mean a new call. @default '1' */
  version?: string;
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
  const { keyFields, version, keyArgument, principal } = options;
  if (keyFields !== undefined && !(Array.isArray(keyFields) && keyFields.every((f) => typeof f === 'string' && f.length > 0))) {
    throw new InvalidOptionError('idem: keyFields must be an array of argument names');
  }
  if (version !== undefined && typeof version !== 'string') throw new InvalidOptionError('idem: version must be a string');
  if (keyArgument !== undefined && !(typeof keyArgument === 'string' && keyArgument.length > 0)) {
    throw new InvalidOptionError('idem: keyArgument must be the name of an argument');
  }
  if (principal !== undefined && typeof principal !== 'function') throw new InvalidOptionError('idem: principal must be a function of the extra');
}

/**
 * The key of one tool call (protocol.md K48): the client's (from `_meta` or the key argument),
 * else the SHA-256 of the canonical JSON (RFC 8785) of the tool's name, the version and the
 * selected arguments. Either way scoped by the principal, so two principals never share a key.
 *
 * @throws {InvalidKeyError} the client sent a key that is not a non-empty string
 */
export function toolCallKey(tool: string, args: Record<string, unknown>, extra: ToolExtra, options: ToolKeyOptions): string {
  const principal = (options.principal ?? defaultPrincipal)(extra) ?? null;
  if (principal !== null && typeof principal !== 'string') throw new InvalidKeyError('idem: the principal must be a string');
  const fromMeta = extra._meta?.[KEY_META];
  const fromArgument = options.keyArgument === undefined ? undefined : args[options.keyArgument];
  const sent = fromMeta !== undefined ? fromMeta : fromArgument;
  if (sent !== undefined) {
    if (typeof sent !== 'string' || sent.length === 0) {
      throw new InvalidKeyError(
        `The idempotency key of a tool call must be a non-empty string (_meta["${KEY_META}"]${options.keyArgument ? ` or the argument "${options.keyArgument}"` : ''})`,
      );
    }
    return scoped(principal, 'key', sent);
  }
  const fingerprint = toolFingerprint(args, options);
  const selected = options.keyFields ? pick(fingerprint, options.keyFields) : fingerprint;
  const derived = createHash('sha256')
    .update(canonicalize({ tool, version: options.version ?? '1', arguments: selected }) ?? 'null')
    .digest('hex');
  return scoped(principal, 'derived', derived);
}

/** The SDK's authenticated client: `authInfo.clientId`. */
function defaultPrincipal(extra: ToolExtra): string | undefined {
  return extra.authInfo?.clientId;
}

/** One string per (principal, kind, key): canonical JSON, so no two triples share it (mapped by K47 where long). */
function scoped(principal: string | null, kind: 'key' | 'derived', key: string): string {
  return canonicalize([principal, kind, key]) as string;
}

/** What must be the same under one key (protocol.md K2): every argument but the key argument. */
export function toolFingerprint(args: Record<string, unknown>, options: ToolKeyOptions): Record<string, unknown> {
  const keyArgument = options.keyArgument;
  if (keyArgument === undefined || !(keyArgument in args)) return args;
  const { [keyArgument]: _key, ...rest } = args;
  return rest;
}

function pick(args: Record<string, unknown>, fields: readonly string[]): Record<string, unknown> {
  const picked: Record<string, unknown> = {};
  for (const field of fields) if (field in args) picked[field] = args[field];
  return picked;
}
