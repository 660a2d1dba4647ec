/**
 * `idem/cloudflare`: the Durable Objects store for Cloudflare Workers (docs/stores/durable-objects.md).
 * The object class the Worker binds is `idem/cloudflare/object` (it imports `cloudflare:workers`).
 */
export { DurableObjectStore, type DurableObjectStoreOptions, type KeyObjectStub, type NoTransaction } from './store.js';
export { KeyObject } from './key-object.js';
export type { WireClaim, WireCommit, WireRecord, WireTakeOver } from './wire.js';
export type { DurableObjectIdLike, DurableObjectNamespaceLike, DurableObjectStateLike, DurableObjectStorageLike, SqlStorageLike } from './workers-types.js';
export { D1Store, type D1StoreOptions, type D1Tx } from './d1.js';
export type { D1DatabaseLike, D1PreparedStatementLike, D1ResultLike } from './d1-types.js';
