/**
 * The key and fingerprint of an agent's tool call, neutral of the framework that calls the tool
 * (protocol.md K49): idem/mcp and idem/ai both find the key here, so one intent has one key
 * whichever surface runs it.
 */
import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import { InvalidKeyError, InvalidOptionError } from '../core/errors.js';

/** How a tool call's key is made from its arguments (protocol.md K49). */
export interface ToolKeyFields {
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
   * the tool's input schema). Its value is the key, and it is not part of the fingerprint.
   */
  keyArgument?: string;
}

/** @throws {InvalidOptionError} for keyFields, version or keyArgument of the wrong type */
export function checkKeyFields(options: ToolKeyFields): void {
  const { keyFields, version, keyArgument } = options;
  if (keyFields !== undefined && !(Array.isArray(keyFields) && keyFields.every((f) => typeof f === 'string' && f.length > 0))) {
    throw new InvalidOptionError('idem: keyFields must be an array of argument names');
  }
  if (version !== undefined && typeof version !== 'string') throw new InvalidOptionError('idem: version must be a string');
  if (keyArgument !== undefined && !(typeof keyArgument === 'string' && keyArgument.length > 0)) {
    throw new InvalidOptionError('idem: keyArgument must be the name of an argument');
  }
}

/**
 * The key of one tool call (protocol.md K49): `sent` (the caller's key, from wherever the
 * surface reads it), else the SHA-256 of the canonical JSON (RFC 8785) of the tool's name, the
 * version and the selected arguments. Either way scoped by the principal, so two principals
 * never share a key.
 *
 * @param where names where a key is sent, for the error message
 * @throws {InvalidKeyError} a sent key that is not a non-empty string, or a principal that is not a string
 */
export function toolKey(tool: string, args: Record<string, unknown>, principal: unknown, sent: unknown, options: ToolKeyFields, where: string): string {
  const who = principal ?? null;
  if (who !== null && typeof who !== 'string') throw new InvalidKeyError('idem: the principal must be a string');
  if (sent !== undefined) {
    if (typeof sent !== 'string' || sent.length === 0) {
      throw new InvalidKeyError(`The idempotency key of a tool call must be a non-empty string (${where})`);
    }
    return scoped(who, 'key', sent);
  }
  const fingerprint = toolFingerprint(args, options);
  const selected = options.keyFields ? pick(fingerprint, options.keyFields) : fingerprint;
  const derived = createHash('sha256')
    .update(canonicalize({ tool, version: options.version ?? '1', arguments: selected }) ?? 'null')
    .digest('hex');
  return scoped(who, 'derived', derived);
}

/** The key argument's value, when the options name one. */
export function keyArgumentOf(args: Record<string, unknown>, options: ToolKeyFields): unknown {
  return options.keyArgument === undefined ? undefined : args[options.keyArgument];
}

/** One string per (principal, kind, key): canonical JSON, so no two triples share it (mapped by K47 where long). */
function scoped(principal: string | null, kind: 'key' | 'derived', key: string): string {
  return canonicalize([principal, kind, key]) as string;
}

/** What must be the same under one key (protocol.md K2): every argument but the key argument. */
export function toolFingerprint(args: Record<string, unknown>, options: ToolKeyFields): Record<string, unknown> {
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
