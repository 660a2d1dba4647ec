import type { EncryptionOptions, ResponseCipher } from '../core/cipher.js';
import type { PollSettings } from '../store/polling-feed.js';
import type { SqliteClient } from './client.js';

/**
 * Options of {@link SqliteStore}.
 * @typeParam C the client: `node:sqlite`'s `DatabaseSync`, better-sqlite3's `Database`,
 *   `bun:sqlite`'s `Database`, or `@libsql/client`'s `Client` on a local `file:` URL
 */
export interface SqliteStoreOptions<C extends SqliteClient = SqliteClient> {
  /**
   * The database, opened on a file (a `:memory:` database is one process's only). A phase's
   * `tx` is this database inside `BEGIN IMMEDIATE` (synchronous clients) or libSQL's
   * `Transaction`. Give idem the connection your phases write on; see docs/guides/sqlite.md
   * for what else may use it while a phase is open.
   */
  client: C;
  /**
   * Table name (a plain identifier); `<table>_tokens` goes beside it.
   * @default 'idempotency_keys'
   */
  table?: string;
  /**
   * How long a statement waits for another process's write lock on the file before the request
   * gets 503 (`PRAGMA busy_timeout`, set on a synchronous client's connection when the store is
   * made). libSQL pools its connections: give `createClient` a `timeout` instead (ms).
   * @default 5000
   */
  busyTimeoutMs?: number;
  /** Encryption at rest of stored responses (protocol.md K15), as `PostgresStore`'s. */
  encryption?: EncryptionOptions | ResponseCipher;
  /**
   * Wait mode (protocol.md K17, K51) polls, as `MySqlStore`'s: a key a duplicate waits for is
   * read again first `minMs` after the wait starts, then at twice the last interval up to
   * `maxMs` while it does not change.
   * @default { minMs: 25, maxMs: 500 }
   */
  waitPoll?: Partial<PollSettings>;
}
