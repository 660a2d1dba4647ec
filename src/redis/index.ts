/**
 * `idem/redis`: the idempotency store on Redis and Redis Cluster (node-redis or ioredis).
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
export type { RedisClientLike, NodeRedisClientLike, NodeRedisClusterLike, IoRedisLike } from './client.js';
export { PostgresPhases, type PostgresPhasesOptions, type PhaseLedger, type LedgerState, type FenceClaim } from './pg-phases.js';
