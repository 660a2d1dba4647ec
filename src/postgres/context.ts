/**
 * The store's options resolved: what every part of `PostgresStore` (claim, commit, sweep,
 * partitions, inspect, notify) works from. Built by `storeContext` (options.ts); its own file
 * so that the parts read it without importing how it is built.
 */
import type { ResponseCipher } from '../core/cipher.js';
import type { BlobStore } from './blob-store.js';
import type { SqlClient, SqlDriver, SqlExecutor } from './client.js';
import type { GroupCommit } from './group-commit.js';
import type { CitusStatements, PartitionedStatements, Statements } from './sql.js';

/**
 * The store's options resolved and validated, with the statements for its table: what every
 * part of the store (claim, commit, sweep, partitions, inspect) works from.
 */
export interface StoreContext<Tx = unknown> {
  readonly table: string;
  /** The request path's executor: every statement under `storeTimeoutMs`. */
  readonly db: SqlExecutor<Tx>;
  /**
   * Migration, partitions, sweeps and operator reads: the same client without the deadline,
   * since a migration may wait for a lock and a sweep batch or a count may outlast it.
   */
  readonly maintenance: SqlExecutor<Tx>;
  readonly sql: Statements;
  /** Partitioned mode's statements, or undefined for a plain table. */
  readonly psql: PartitionedStatements | undefined;
  /** Partitioned mode's options with their defaults (`PartitionOptions`), or undefined for a plain table. */
  readonly partitioning: { daysAhead: number; dropLockTimeoutMs: number } | undefined;
  /** Bodies longer than this (plaintext bytes) go to `blobs`. */
  readonly inlineMaxBytes: number;
  readonly blobs: BlobStore;
  readonly cipher: ResponseCipher | undefined;
  /** The LISTEN/NOTIFY channel when `notify` is on, else undefined. */
  readonly channel: string | undefined;
  /** True when the notification is its own statement after the change (`notify: 'after-commit'`, and Citus). */
  readonly notifyAfterCommit: boolean;
  /** The client as given (for LISTEN). */
  readonly client: SqlClient | SqlDriver<Tx>;
  /** `storeTimeoutMs` (protocol.md H17): also bounds a LISTEN becoming active (wait mode). */
  readonly timeoutMs: number;
  /** Group commit's batchers when `groupCommit` is on, else undefined. */
  readonly group: GroupCommit | undefined;
  /** Citus mode's own statements when `distributed` is 'citus', else undefined. */
  readonly citus: CitusStatements | undefined;
}
