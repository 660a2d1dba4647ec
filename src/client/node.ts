/**
 * `idem/client/node`: everything in `idem/client` plus `FileIntentStore`, the durable intent
 * store for Node (one crash-safe file per intent). Kept apart so `idem/client` never imports a
 * `node:` module and bundles for browsers as is.
 */
export * from './index.js';
export { FileIntentStore } from './file-store.js';
