export { PostgresStore, type PostgresStoreOptions, type SweepOptions } from './store.js';
export type { SqlClient, Queryable, PoolLike, PoolClientLike, TransactionalLike, QueryResultLike } from './client.js';
