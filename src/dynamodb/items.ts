/**
 * How one key lives in the DynamoDB table (protocol.md K53): the key item (`sk = "key"`) and,
 * for a response too large for one item, its chunk items (`sk = "chunk#<token>#<n>"`). Reading
 * an item back into a {@link KeyRecord}, with the lease and retention judged by the app's clock
 * (DynamoDB has none, K53 2).
 */
import { KeyState } from '../core/constants.js';
import type { KeyRecord, PhaseResults } from '../store/types.js';
import type { AttributeValue, Item } from './client.js';

/** The sort key of a key item. */
export const KEY_SK = 'key';

/** Attribute names of a key item (short: every byte counts toward the 400 KB item limit). */
export const A = {
  scope: 'sc',
  key: 'ky',
  state: 'st',
  fingerprint: 'fp',
  recoveryPoint: 'rp',
  phaseResults: 'pr',
  token: 'tok',
  claimId: 'cid',
  /** Lease end, epoch ms; absent once finished. */
  lockedUntil: 'lu',
  released: 'rel',
  failedAttempts: 'fa',
  /** The claim's time, epoch ms (retention counts from it, K6). */
  createdAt: 'ca',
  /** The claim's retention end, epoch ms: what the TTL attribute must not undercut. */
  retainUntil: 'ru',
  finishedAt: 'fin',
  status: 'rs',
  headers: 'rh',
  /** Inline body bytes (absent for an empty body). */
  body: 'rb',
  /** Chunk count of an out-of-line body, and the token its chunks were written under. */
  chunks: 'rc',
  chunkToken: 'rct',
  operatorNote: 'opn',
  /** The request snapshot (completer, protocol.md K13), JSON with the body in base64. */
  request: 'rq',
} as const;

/** The partition key of (scope, key): length-prefixed, so no two pairs share it. */
export function partitionKey(scope: string, key: string): string {
  return `${scope.length}:${scope}:${key}`;
}

/** The primary key of the key item of (scope, key). */
export function keyOf(scope: string, key: string): Item {
  return { pk: { S: partitionKey(scope, key) }, sk: { S: KEY_SK } };
}

/** The sort-key prefix of the chunks written under `token`, and one chunk's sort key. */
export const chunkPrefix = (token: number): string => `chunk#${token}#`;
export const chunkSk = (token: number, n: number): string => `${chunkPrefix(token)}${String(n).padStart(5, '0')}`;

export const num = (n: number): AttributeValue => ({ N: String(n) });
export const str = (s: string): AttributeValue => ({ S: s });

export function readNum(item: Item, name: string): number | undefined {
  const v = item[name] as { N?: string } | undefined;
  return v?.N === undefined ? undefined : Number(v.N);
}
export function readStr(item: Item, name: string): string | undefined {
  return (item[name] as { S?: string } | undefined)?.S;
}
export function readBytes(item: Item, name: string): Uint8Array | undefined {
  const b = (item[name] as { B?: Uint8Array } | undefined)?.B;
  return b === undefined ? undefined : new Uint8Array(b);
}

/**
 * The clock rule (protocol.md K53 2): lease ends are the writer's wall clock; a lease counts as
 * over for everyone else only `skewMs` after its end, so a host whose clock runs up to `skewMs`
 * ahead never takes a live lease. A released lease (its worker said so) is over at its end.
 */
export function leaseOver(item: Item, now: number, skewMs: number): boolean {
  const lu = readNum(item, A.lockedUntil);
  if (lu === undefined) return true;
  return item[A.released] !== undefined && (item[A.released] as { BOOL?: boolean }).BOOL === true ? lu <= now : lu + skewMs <= now;
}

/** The same rule as a `ConditionExpression` part, with `:now`, `:nowSkew` (= now − skewMs) and `:true` bound. */
export const LEASE_OVER = `(attribute_not_exists(${A.lockedUntil}) OR ${A.lockedUntil} <= :nowSkew OR (${A.released} = :true AND ${A.lockedUntil} <= :now))`;

/** Milliseconds of lease left as a taker sees it (0 when over). */
export function leaseRemaining(item: Item, now: number, skewMs: number): number {
  if (leaseOver(item, now, skewMs)) return 0;
  const lu = readNum(item, A.lockedUntil)!;
  const released = (item[A.released] as { BOOL?: boolean } | undefined)?.BOOL === true;
  return lu + (released ? 0 : skewMs) - now;
}

/** Past retention by the app's clock: created at or before `now − retentionMs` (protocol.md K6). */
export function retentionOver(item: Item, retentionMs: number, now: number): boolean {
  return (readNum(item, A.createdAt) ?? 0) <= now - retentionMs;
}

/** The phase results: a map of phase name to its result's JSON text (one `SET pr.#phase` per phase commit). */
export function readPhaseResults(item: Item): PhaseResults {
  const m = (item[A.phaseResults] as { M?: Record<string, { S?: string }> } | undefined)?.M ?? {};
  return Object.fromEntries(Object.entries(m).map(([name, v]) => [name, JSON.parse(v.S ?? 'null') as unknown]));
}

/** The key item as a record, without its response (read by the store, chunks and all). */
export function toRecord(item: Item, scope: string, key: string, now: number, skewMs: number): KeyRecord {
  const expired = leaseOver(item, now, skewMs);
  const record: KeyRecord = {
    scope,
    key,
    state: readStr(item, A.state) === KeyState.Done ? KeyState.Done : KeyState.Started,
    fingerprint: readBytes(item, A.fingerprint) ?? new Uint8Array(),
    recoveryPoint: readStr(item, A.recoveryPoint) ?? 'start',
    phaseResults: readPhaseResults(item),
    token: readNum(item, A.token) ?? 0,
    claimId: readStr(item, A.claimId) ?? '',
    leaseExpired: expired,
    leaseRemainingMs: expired ? 0 : leaseRemaining(item, now, skewMs),
    createdAt: new Date(readNum(item, A.createdAt) ?? 0),
  };
  const note = readStr(item, A.operatorNote);
  if (note !== undefined) record.operatorNote = note;
  return record;
}
