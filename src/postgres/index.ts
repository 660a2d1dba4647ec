export {
  PostgresStore,
  type PostgresStoreOptions,
  type PartitionOptions,
  type SweepOptions,
  type SweepProgress,
  type SweepReport,
  type SweepPlan,
  type KeyInspection,
  type StoreStats,
} from './store.js';
export type { SqlClient, Queryable, PoolLike, PoolClientLike, TransactionalLike, QueryResultLike } from './client.js';
