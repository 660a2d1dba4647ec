/**
 * `idem/client`: one idempotency key per user intent, persisted before the first attempt and
 * reused by every retry, also after a restart. Runs in browsers and Node (no `node:` imports
 * here); the durable file store for Node is `idem/client/node`.
 */
export {
  IdempotentClient,
  type IdempotentClientOptions,
  type IdempotentResponse,
  type RetryEvent,
  type GiveUpEvent,
  type ResumeResult,
  type HeadersLike,
} from './client.js';
export { type IntentRecord, type IntentState, type IntentStore, CREDENTIAL_HEADERS } from './intent.js';
export { MemoryIntentStore } from './memory-store.js';
export { LocalStorageIntentStore, type WebStorageLike } from './web-storage-store.js';
export { IndexedDbIntentStore } from './indexeddb-store.js';
export { classifyStatus, parseRetryAfterMs, fullJitterDelayMs } from './retry-policy.js';
export * from './errors.js';
