import { aesGcmCipher, type EncryptionOptions, type ResponseCipher } from '../core/cipher.js';
import { InvalidOptionError } from '../core/errors.js';
import { DEFAULT_STORE_TIMEOUT_MS } from '../store/deadline.js';
import { DEFAULT_INLINE_MAX_BYTES } from '../store/stored-form.js';
import { type BlobStore, TableBlobStore } from './blob-store.js';
import { channelName, notifyingStatements } from './notify.js';
import { isSqlDriver, type Queryable, type SqlDriver, type SqlExecutor, type StoreClient } from './client.js';
import type { StoreContext } from './context.js';
import { toExecutor } from './executor.js';
import { GroupCommit, type GroupCommitOptions } from './group-commit.js';
import { type CitusStatements, distributedStatements, type PartitionedStatements, partitionedStatements, type Statements, statements } from './sql.js';

/** Bodies above 64 KiB go out of line by default (the reasons: src/store/stored-form.ts). */
export { DEFAULT_INLINE_MAX_BYTES };

/** Default deadline of each of idem's statements, in ms (`storeTimeoutMs`): the one every store shares. */
export { DEFAULT_STORE_TIMEOUT_MS };

/**
 * Options of `PostgresStore`.
 * @typeParam Tx what a phase's effects receive: {@link Queryable} (the connection) on a
 *   `pg.Pool` or PGlite, the client's own transaction object on a {@link SqlDriver}
 */
export interface PostgresStoreOptions<Tx = Queryable> {
  /**
   * A `pg.Pool`, a PGlite instance, or a driver over another client: `postgresjs(sql)` from
   * `idem/postgresjs` (and the other adapters; see the README, "Database clients").
   */
  client: StoreClient<Tx>;
  /**
   * Table name, optionally schema-qualified.
   * @default 'idempotency_keys'
   */
  table?: string;
  /**
   * Response bodies longer than this many bytes (before encryption) are stored out of line in
   * `blobStore` and the row keeps a pointer; `Infinity` keeps every body inline.
   * @default 65_536 (64 KiB, see {@link DEFAULT_INLINE_MAX_BYTES}); in partitioned mode without a
   * `blobStore`, `Infinity` (a partitioned table cannot be the target of the blob table's foreign key)
   */
  inlineMaxBytes?: number;
  /**
   * Where out-of-line bodies live.
   * @default the table `<table>_blobs` in the same database, written in the finish's transaction
   */
  blobStore?: BlobStore;
  /**
   * Encryption at rest of stored response bodies and headers: AES-256-GCM keys by key id and
   * the current key id (see `aesGcmCipher`), or any {@link ResponseCipher}. Off by default.
   * Rows written before it was turned on still replay (plaintext).
   */
  encryption?: EncryptionOptions | ResponseCipher;
  /**
   * Partitioned mode: the table is range-partitioned by `created_at`, one partition per UTC
   * day, created ahead by `PostgresStore.maintain`, and `PostgresStore.sweep`
   * drops whole expired partitions. The claim then serialises on a per-key advisory lock,
   * since PostgreSQL cannot enforce (scope, key) uniqueness across partitions (see
   * `partitionedStatements` in sql.ts). `true` uses the defaults.
   * @default false (one plain table)
   */
  partitioned?: boolean | PartitionOptions;
  /**
   * Deadline in ms of each statement idem issues on a `pg.Pool` for a request (the wait for a
   * connection included; migrations, sweeps and operator reads have none). Past it the statement fails, its connection is destroyed rather than returned
   * to the pool, and the request gets `503` with `Retry-After` (protocol.md H17): a database
   * that accepts connections and never answers costs a request this long, not a hang. Keep it
   * well under `leaseMs`. A pool without `connectionTimeoutMillis` gets this value as its
   * connect timeout. `0` turns the deadline off. PGlite runs in process and has none. On a
   * driver (`idem/postgresjs`, …) the deadline holds for idem's statements and the commit of a
   * phase, but the connection is the client's: idem cannot destroy it, so set the client's own
   * timeouts as well (e.g. `statement_timeout`).
   * @default 5000
   */
  storeTimeoutMs?: number;
  /**
   * Requests that may wait for a pool connection at once; one more gets `503` at once
   * instead of queueing without bound (shedding load never runs a request twice: nothing was
   * claimed). `pg.Pool` only: a driver's client queues for its own connections, and the store
   * rejects this option with one.
   * @default 256
   */
  maxPoolWaiting?: number;
  /**
   * Wait mode (protocol.md K17): the takeover, finish, release and discard statements send
   * `pg_notify('idem_<table>', …)` in their own transaction, and the store gets `subscribe`,
   * so an engine with `inProgress: { wait }` wakes its waiting duplicates the moment the key
   * changes. Turn it on in every process that writes the table (a process without it changes
   * keys silently, and its waiters' peers only learn at the end of their wait). Off by default:
   * PostgreSQL serialises the commits of notifying transactions on one database-wide lock.
   * On a driver, only when the driver can `listen` (postgres.js can); otherwise the store
   * rejects the option.
   *
   * `'after-commit'`: the statements stay as they are, and the store sends
   * `SELECT pg_notify(…)` on its own client right after a takeover, finish, release or discard
   * returned (committed). The only way on Citus (`distributed: 'citus'`, where `true` means
   * this): a key's statement runs on the shard's worker, where no one listens, while this
   * statement runs on the coordinator the waiters listen on. A process that dies between the
   * commit and the notification leaves its waiters to their deadline read (protocol.md K17).
   * @default false
   */
  notify?: boolean | 'after-commit';
  /**
   * Group commit (protocol.md K19): claims of different keys arriving within `windowMs` share
   * one multi-row statement and one commit, and so do finishes without local effects whose
   * body is stored inline (not in wait mode, whose finishes notify one by one). Durability is
   * unchanged (`synchronous_commit` as configured); each caller gets its own outcome. Worth it
   * under concurrency, when commits are the limit; a lone request waits up to `windowMs` more.
   * `true` uses the defaults. Plain tables only: partitioned mode claims under a per-key lock
   * in a transaction of its own, so it rejects this option.
   * @default false
   */
  groupCommit?: boolean | GroupCommitOptions;
  /**
   * Citus mode: the table is (or will be, by `PostgresStore.distribute` or
   * `idem migrate --distribute`) a Citus distributed table, distributed by `scope`, so that
   * a tenant's business tables co-located with it commit a phase on one shard. The claim is
   * insert-first, the takeover draws its token before its UPDATE, the sweep runs per shard
   * (README, "Citus"). Connect through the coordinator. Not with `partitioned`, `groupCommit`
   * or `notify`.
   * @default undefined (a table on one PostgreSQL)
   */
  distributed?: 'citus';
}

/** Options of partitioned mode. */
export interface PartitionOptions {
  /**
   * Daily partitions kept ready ahead of today (UTC), besides today's and yesterday's, by
   * `migrate()` and `maintain()`. Run `maintain()` (or `idem partitions`) at least daily: a
   * claim on a day without a partition fails (the HTTP layer answers 503).
   * @default 7
   */
  daysAhead?: number;
  /**
   * How long a partition drop may wait for its locks, in ms; claims queue behind a waiting
   * drop, so keep it short. On timeout the partition is kept for the next sweep.
   * @default 1000
   */
  dropLockTimeoutMs?: number;
}

/**
 * Resolves and checks `options`.
 * @throws {TypeError} for a client that is neither a pg.Pool, PGlite nor a driver
 * @throws {InvalidOptionError} for a bad table name, a negative `inlineMaxBytes`, bad encryption
 *   keys, bad partition options, `inlineMaxBytes` in partitioned mode without a `blobStore`,
 *   or, with a driver, `maxPoolWaiting`, or `notify` when the driver cannot listen
 */
export function storeContext<Tx>(options: PostgresStoreOptions<Tx>): StoreContext<Tx> {
  const timeoutMs = options.storeTimeoutMs ?? DEFAULT_STORE_TIMEOUT_MS;
  if (!(timeoutMs >= 0)) throw new InvalidOptionError('idem/postgres: storeTimeoutMs must be a number of ms >= 0 (0: no deadline)');
  const maxWaiting = options.maxPoolWaiting ?? 256;
  if (!(maxWaiting >= 0)) throw new InvalidOptionError('idem/postgres: maxPoolWaiting must be a number >= 0');
  if (isSqlDriver(options.client)) driverOptions(options.client, options);
  const db = toExecutor<Tx>(options.client, { timeoutMs, maxWaiting });
  const table = options.table ?? 'idempotency_keys';
  let sql: Statements;
  let citusSql: CitusStatements | undefined;
  try {
    sql = statements(table);
  } catch (error) {
    throw new InvalidOptionError((error as Error).message);
  }
  const citus = citusMode(options);
  if (citus) ({ sql, citus: citusSql } = distributedStatements(table, sql));
  // Partitioned mode drops whole partitions, and a foreign key cannot reference (scope, key)
  // on a partitioned table (its unique keys include created_at), so the default table blob
  // store has nothing to cascade from: bodies stay inline unless an external blob store,
  // whose own expiry cleans up, is given.
  if (options.partitioned && options.blobStore === undefined && options.inlineMaxBytes !== undefined && options.inlineMaxBytes !== Infinity) {
    throw new InvalidOptionError(
      'idem/postgres: partitioned mode keeps bodies inline unless you pass a blobStore (with an expiry rule of retention + 1 day); drop inlineMaxBytes or add blobStore',
    );
  }
  const inlineMaxBytes = options.inlineMaxBytes ?? (options.partitioned && !options.blobStore ? Infinity : DEFAULT_INLINE_MAX_BYTES);
  if (!(inlineMaxBytes >= 0)) throw new InvalidOptionError('idem/postgres: inlineMaxBytes must be a number of bytes >= 0');
  const blobs = options.blobStore ?? new TableBlobStore(db, sql);
  const enc = options.encryption;
  const cipher = enc === undefined ? undefined : 'seal' in enc ? enc : aesGcmCipher(enc);
  let partitioning: Required<PartitionOptions> | undefined;
  let psql: PartitionedStatements | undefined;
  if (options.partitioned) {
    const p = options.partitioned === true ? {} : options.partitioned;
    partitioning = { daysAhead: p.daysAhead ?? 7, dropLockTimeoutMs: p.dropLockTimeoutMs ?? 1000 };
    if (!Number.isInteger(partitioning.daysAhead) || partitioning.daysAhead < 1) {
      throw new InvalidOptionError('partitioned.daysAhead must be an integer >= 1');
    }
    if (!(partitioning.dropLockTimeoutMs >= 1)) throw new InvalidOptionError('partitioned.dropLockTimeoutMs must be >= 1');
    psql = partitionedStatements(table);
  }
  const channel = options.notify ? channelName(table) : undefined;
  const notifyAfterCommit = channel !== undefined && (citus || options.notify === 'after-commit');
  if (channel && !notifyAfterCommit) sql = notifyingStatements(sql, channel);
  const group = groupCommit(options, db, sql, timeoutMs, channel === undefined);
  return {
    table,
    db,
    maintenance: toExecutor<Tx>(options.client),
    sql,
    psql,
    partitioning,
    inlineMaxBytes,
    blobs,
    cipher,
    channel,
    notifyAfterCommit,
    client: options.client,
    timeoutMs,
    group,
    citus: citusSql,
  };
}

/**
 * Whether the store is in Citus mode.
 * @throws {InvalidOptionError} for another value, or with `partitioned` or `groupCommit`
 */
function citusMode(options: Omit<PostgresStoreOptions<unknown>, 'client'>): boolean {
  if (options.distributed === undefined) return false;
  if (options.distributed !== 'citus') throw new InvalidOptionError("idem/postgres: distributed must be 'citus' or left out");
  if (options.partitioned) {
    throw new InvalidOptionError(
      'idem/postgres: distributed and partitioned do not combine: a partitioned claim serialises on a per-node advisory lock; distribute a plain table',
    );
  }
  if (options.groupCommit) {
    throw new InvalidOptionError(
      "idem/postgres: distributed does not combine with groupCommit: a batch spans shards, so its one commit becomes a two-phase commit over every shard's node",
    );
  }
  return true;
}

/** The options that mean nothing, or cannot work, on a driver's client. @throws {InvalidOptionError} */
function driverOptions(driver: SqlDriver<unknown>, options: Omit<PostgresStoreOptions<unknown>, 'client'>): void {
  if (options.maxPoolWaiting !== undefined) {
    throw new InvalidOptionError(`idem/postgres: maxPoolWaiting is for a pg.Pool; the ${driver.name} client queues for its own connections`);
  }
  if (options.notify && typeof driver.listen !== 'function') {
    throw new InvalidOptionError(
      `idem/postgres: notify needs LISTEN, which the ${driver.name} driver cannot do; use a pg.Pool or postgres.js driver for wait mode`,
    );
  }
}

/** Group commit's batchers, or undefined when the option is off. @throws {InvalidOptionError} */
function groupCommit(
  options: Omit<PostgresStoreOptions<unknown>, 'client'>,
  db: SqlExecutor<unknown>,
  sql: Statements,
  timeoutMs: number,
  batchFinishes: boolean,
): GroupCommit | undefined {
  const given = options.groupCommit;
  if (given === undefined || given === false) return undefined;
  if (given !== true && (typeof given !== 'object' || given === null))
    throw new InvalidOptionError('idem/postgres: groupCommit must be true, false or { windowMs, maxBatch }');
  if (options.partitioned) {
    throw new InvalidOptionError('idem/postgres: groupCommit needs a plain table (a partitioned claim takes a per-key lock in a transaction of its own)');
  }
  const o = given === true ? {} : given;
  const windowMs = o.windowMs ?? 2;
  const maxBatch = o.maxBatch ?? 64;
  if (!(windowMs >= 0 && windowMs <= 1000)) throw new InvalidOptionError('idem/postgres: groupCommit.windowMs must be a number of ms from 0 to 1000');
  if (timeoutMs > 0 && windowMs >= timeoutMs) throw new InvalidOptionError('idem/postgres: groupCommit.windowMs must be shorter than storeTimeoutMs');
  if (!Number.isInteger(maxBatch) || maxBatch < 1 || maxBatch > 1000)
    throw new InvalidOptionError('idem/postgres: groupCommit.maxBatch must be an integer from 1 to 1000');
  if (o.onBatch !== undefined && typeof o.onBatch !== 'function') throw new InvalidOptionError('idem/postgres: groupCommit.onBatch must be a function');
  return new GroupCommit(db, sql, { windowMs, maxBatch, onBatch: o.onBatch }, batchFinishes);
}
