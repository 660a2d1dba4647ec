export {
  PostgresStore,
  DEFAULT_INLINE_MAX_BYTES,
  DEFAULT_STORE_TIMEOUT_MS,
  type PostgresStoreOptions,
  type PartitionOptions,
  type SweepOptions,
  type SweepProgress,
  type SweepReport,
  type SweepPlan,
  type KeyInspection,
  type StoreStats,
} from './store.js';
export { TableBlobStore, type BlobStore, type BlobRef } from './blob-store.js';
export { StoreTimeoutError } from './pool-executor.js';
export type { SqlClient, Queryable, PoolLike, PoolClientLike, TransactionalLike, QueryResultLike } from './client.js';
export { aesGcmCipher, responseAad, type ResponseCipher, type EncryptionOptions } from '../core/cipher.js';
