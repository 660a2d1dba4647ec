import type { EncryptionOptions, ResponseCipher } from '../core/cipher.js';
import type { MySqlConnectionLike, MySqlDriver, MySqlPoolLike } from './client.js';
import type { PollSettings } from './wait.js';

/**
 * Options of {@link MySqlStore}.
 * @typeParam Tx what a phase's effects receive: the pool's connection, or the driver's transaction
 */
export interface MySqlStoreOptions<Tx = MySqlConnectionLike> {
  /**
   * A mysql2 promise pool (`mysql.createPool(…)` from `mysql2/promise`): a phase's `tx` is its
   * `PoolConnection`. Or a client over one, whose transaction a phase gets: `drizzleMySql(db)`.
   */
  client: MySqlPoolLike<Tx & MySqlConnectionLike> | MySqlDriver<Tx>;
  /**
   * Table name, optionally database-qualified; `<table>_blobs` and `<table>_tokens` go beside it.
   * @default 'idempotency_keys'
   */
  table?: string;
  /**
   * Response bodies longer than this many bytes (before encryption) are stored out of line in
   * `<table>_blobs`, written in the finish's transaction; `Infinity` keeps every body inline.
   * Keep the largest body under the server's `max_allowed_packet`.
   * @default 65_536
   */
  inlineMaxBytes?: number;
  /** Encryption at rest of stored responses (protocol.md K15), as `PostgresStore`'s. */
  encryption?: EncryptionOptions | ResponseCipher;
  /**
   * Deadline in ms of each statement idem issues for a request, the wait for a pool connection
   * included (protocol.md H17); past it the connection is destroyed, never reused, and the
   * request gets 503. Migrations, sweeps and operator reads have none. `0`: no deadline.
   * Give the pool a `connectTimeout` as well.
   * @default 5000
   */
  storeTimeoutMs?: number;
  /**
   * Wait mode (protocol.md K17) polls: a key a duplicate waits for is read again (one
   * primary-key read) first `minMs` after the wait starts, then at twice the last interval up
   * to `maxMs` while it does not change. Lower `maxMs` answers a waiting duplicate sooner and
   * costs more reads per waited-for key.
   * @default { minMs: 25, maxMs: 500 }
   */
  waitPoll?: Partial<PollSettings>;
}
