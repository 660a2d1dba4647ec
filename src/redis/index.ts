/**
 * `idem/redis`: the idempotency store on Redis, Valkey and their clusters (node-redis, ioredis
 * or Valkey GLIDE).
 * Claims, leases, fencing and replays in Redis; phases are not atomic with their effects
 * (see {@link NoTransaction}).
 */
export {
  RedisStore,
  NotReplicatedError,
  NO_TRANSACTION,
  type NoTransaction,
  type RedisStoreOptions,
  type DurabilityOptions,
} from './store.js';
export { StoreTimeoutError } from '../store/deadline.js';
export type {
  RedisClientLike,
  NodeRedisClientLike,
  NodeRedisClusterLike,
  IoRedisLike,
  GlideClientLike,
  GlideClusterClientLike,
  GlideScriptLike,
  GlideRoute,
} from './client.js';
export { PostgresPhases, type PostgresPhasesOptions, type PhaseLedger, type LedgerState, type FenceClaim } from './pg-phases.js';
