/** The options and transaction handle of the memory store (store.ts). */

/**
 * The transaction handle a {@link MemoryStore} passes to a commit's effects. The memory store
 * buffers nothing: effects run at once, against whatever they touch. What it cannot do by
 * itself is undo them, so an effect that must vanish when its commit does not happen
 * registers its undo here.
 *
 * Why an undo hook rather than "no rollback": the contract every store passes says a fenced
 * commit (a stale token: another worker took the key over) or a commit whose effects or
 * record throw leaves no trace of its effects. A real store gets that from its database
 * transaction; an in-process store can only get it from the effect itself. With the hook the
 * memory store keeps the same contract (the test suite checks it, the same as on PostgreSQL)
 * for effects written to roll back, e.g. a push onto an array that registers the matching
 * splice. Effects that register nothing (a call to another system, a log line) stay done.
 */
export interface MemoryTx {
  /**
   * Registers `undo`, run if this commit does not take effect: the token was stale (the
   * result is `fenced`), or the effects or the record threw. Undos run last registered
   * first; an undo that throws does not stop the others (its error is dropped).
   */
  onRollback(undo: () => void | Promise<void>): void;
}

/** Options of {@link MemoryStore}. */
export interface MemoryStoreOptions {
  /**
   * The clock, in epoch milliseconds, used for every lease and retention comparison and for
   * `createdAt`. Tests pass their own to move time without waiting.
   * @default `performance.timeOrigin + performance.now()`: the process's monotonic clock,
   *   anchored at its start, so a wall-clock step never ends a live lease early.
   */
  clock?: () => number;
}

/** A sweep of a {@link MemoryStore}. */
export interface MemorySweepOptions {
  /** Keys created at or before `clock() - retentionMs` whose lease is not valid are deleted. @default 24 h */
  retentionMs?: number;
  /** Accepted for parity with `PostgresStore.sweep` (a memory sweep is one pass). Integer >= 1. @default 1000 */
  batchSize?: number;
}
