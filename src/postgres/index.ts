export { PostgresStore, DEFAULT_INLINE_MAX_BYTES, type PostgresStoreOptions, type SweepOptions } from './store.js';
export { TableBlobStore, type BlobStore, type BlobRef } from './blob-store.js';
export type { SqlClient, Queryable, PoolLike, PoolClientLike, TransactionalLike, QueryResultLike } from './client.js';
export { aesGcmCipher, responseAad, type ResponseCipher, type EncryptionOptions } from '../core/cipher.js';
