/**
 * The options of `RedisStore` and the error of its `durability` option.
 */
import { ErrorCode, IdempotencyError } from '../core/errors.js';
import type { RedisClientLike } from './client.js';
import type { PhaseLedger } from './pg-phases.js';
import type { NoTransaction } from './no-transaction.js';

/** Wait for replicas after the claim and after finish (`WAIT replicas timeoutMs`). */
export interface DurabilityOptions {
  /** Replicas that must acknowledge the write; at least 1. */
  replicas: number;
  /** How long WAIT may block, in ms; at least 1. @default 1000 */
  timeoutMs?: number;
}

/**
 * Options of `RedisStore`.
 * @typeParam Tx what a phase's effects receive: {@link NoTransaction} without `phases`, the
 *   ledger's transaction handle with it.
 */
export interface RedisStoreOptions<Tx = NoTransaction> {
  /**
   * A connected node-redis client or cluster, an ioredis `Redis` or `Cluster`, or a Valkey GLIDE
   * `GlideClient` or `GlideClusterClient` (protocol.md K55).
   */
  client: RedisClientLike;
  /** Prefix of every key the store writes, without `{` or `}`. @default 'idem' */
  prefix?: string;
  /**
   * Makes the claim and the finish wait until `replicas` replicas acknowledged them (`WAIT`).
   * Fewer within `timeoutMs`: the claim is discarded and fails ({@link NotReplicatedError},
   * reported by the engine as store unavailable, HTTP 503); a finish throws it (the response
   * is stored on the primary only: the outcome is indeterminate). Off by default: a failover
   * may then lose acknowledged claims (docs/reliability.md).
   */
  durability?: DurabilityOptions;
  /**
   * Commits phases (effects and recorded result in one transaction) in the application's
   * PostgreSQL instead of after the effects in Redis: `new PostgresPhases({ client: pool })`.
   * Claims, leases and replays stay in Redis. Without it, phases are not atomic
   * ({@link NoTransaction}).
   */
  phases?: PhaseLedger<Tx>;
  /**
   * Answer retries of finished keys with a plain `HGETALL` before the claim script, retention
   * judged by a bound of the server's clock (a `TIME` at most once a second while it reads
   * first, a sample over 2 s old never used, protocol.md K28): a replay costs one native read
   * instead of a Lua call, a new key one extra round trip. `'adaptive'`:
   * only while at least half of the recent claims found a finished key, so a stream of new keys
   * costs two round trips each (claim and finish scripts), not three; the answers are the same.
   * @default 'adaptive'
   */
  replayFastPath?: boolean | 'adaptive';
  /**
   * Deadline of each command the store sends, in ms (protocol.md H17): a Redis (or a Cluster
   * node) that accepted the connection and never answers fails the call with a
   * `StoreTimeoutError` after this long, so the request gets `503` with `Retry-After` instead
   * of hanging; mid-work, the attempt fails as a throw. A `WAIT` (`durability`) may take
   * `durability.timeoutMs` more. The connection is not reset for a late reply: a Redis that
   * stalls and resumes answers on it in order (see `silentLinkMs` for one that never does).
   * `0` turns the deadline off (and `silentLinkMs` with it).
   * @default 5000
   */
  storeTimeoutMs?: number;
  /**
   * How long one of idem's commands may wait with no reply before its connection counts as
   * dead (a black hole: accepts bytes, never answers) and idem makes the client reconnect:
   * ioredis by destroying the socket of the client or of every Cluster node, node-redis (client
   * or cluster) with `destroy()` then `connect()` (protocol.md H25). Checked when a command
   * misses `storeTimeoutMs`, at most once per `silentLinkMs`. `0`: never.
   * @default 3 × storeTimeoutMs
   */
  silentLinkMs?: number;
}

/** Fewer replicas than `durability.replicas` acknowledged a write within `durability.timeoutMs`. */
export class NotReplicatedError extends IdempotencyError {
  /** Replicas that acknowledged. */
  readonly acknowledged: number;
  constructor(what: string, acknowledged: number, wanted: number) {
    // Retryable: the write may have landed on the primary; the key's next attempt reads it.
    super(ErrorCode.NotReplicated, `idem/redis: the ${what} was acknowledged by ${acknowledged} of ${wanted} replicas`, { retryable: true });
    this.acknowledged = acknowledged;
  }
}
