export { PostgresStore } from './store.js';
export { DEFAULT_INLINE_MAX_BYTES, DEFAULT_STORE_TIMEOUT_MS, type PostgresStoreOptions, type PartitionOptions } from './options.js';
export type { SweepOptions, SweepProgress, SweepReport, SweepPlan } from './sweep.js';
export type { KeyInspection, StoreStats } from './inspect.js';
export { TableBlobStore, type BlobStore, type BlobRef } from './blob-store.js';
export { StoreTimeoutError } from './pool-executor.js';
export type { SqlClient, Queryable, PoolLike, PoolClientLike, TransactionalLike, QueryResultLike } from './client.js';
export { aesGcmCipher, responseAad, type ResponseCipher, type EncryptionOptions } from '../core/cipher.js';
