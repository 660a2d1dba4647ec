/**
 * Redis key names of the Redis store.
 *
 * One idempotency key (scope, key) lives in `<prefix>:{<scope>:<key>}` (a hash) and
 * `<prefix>:{<scope>:<key>}:token` (its token counter). Both carry the same hash tag, so on
 * Redis Cluster they hash to one slot and every script touches one node. In the tag, `\` and
 * `:` of the scope are escaped (`\\`, `\:`), so the first bare `:` ends the scope and two
 * different (scope, key) pairs never share a name (`a:b` + `c` vs `a` + `b:c`). A `}` inside
 * the scope or key ends the tag early; both names still share it, so they stay in one slot.
 */
import { InvalidOptionError } from '../core/errors.js';

/** Checks a key prefix: 1-64 characters, no `{` or `}` (they would move the hash tag). */
export function validatePrefix(prefix: string): string {
  if (typeof prefix !== 'string' || prefix.length < 1 || prefix.length > 64 || /[{}]/.test(prefix)) {
    throw new InvalidOptionError('idem/redis: prefix must be 1-64 characters without { or }');
  }
  return prefix;
}

/** The hash of (scope, key). */
export function hashKey(prefix: string, scope: string, key: string): string {
  return `${prefix}:{${scope.replaceAll('\\', '\\\\').replaceAll(':', '\\:')}:${key}}`;
}

/** The token counter beside a key's hash (same hash tag). */
export function tokenKey(hash: string): string {
  return `${hash}:token`;
}

/** The in-flight index: one sorted set per prefix (its own slot on Cluster). */
export function indexKey(prefix: string): string {
  return `${prefix}:inflight`;
}

/** An index member naming (scope, key): their JSON array, unambiguous. */
export function indexMember(scope: string, key: string): string {
  return JSON.stringify([scope, key]);
}

/** Reads an index member back; `undefined` when it is not one. */
export function parseMember(member: string): { scope: string; key: string } | undefined {
  try {
    const v = JSON.parse(member) as unknown;
    if (Array.isArray(v) && typeof v[0] === 'string' && typeof v[1] === 'string') return { scope: v[0], key: v[1] };
  } catch {
    // not ours
  }
  return undefined;
}
