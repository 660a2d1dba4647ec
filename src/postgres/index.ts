export {
  PostgresStore,
  DEFAULT_INLINE_MAX_BYTES,
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
export type { SqlClient, Queryable, PoolLike, PoolClientLike, TransactionalLike, QueryResultLike } from './client.js';
export { aesGcmCipher, responseAad, type ResponseCipher, type EncryptionOptions } from '../core/cipher.js';
export { toExecutor, type SqlExecutor } from './client.js';
export { lockDataDir } from '../cli/database.js';
