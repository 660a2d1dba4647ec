/**
 * `idem/memory`: the in-memory store, for unit tests and a fast test tier. It deduplicates
 * within one process only.
 */
export { MemoryStore, type MemoryStoreOptions, type MemorySweepOptions, type MemoryTx } from './store.js';
