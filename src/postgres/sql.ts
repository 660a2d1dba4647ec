/**
 * Every SQL statement idem's PostgreSQL store issues, named and commented, assembled per table
 * from the files in `sql/` (one per concern). Nothing else in the code base writes SQL for the
 * store. Statements take the (validated, quoted) table name; parameters are always bound,
 * never interpolated.
 *
 * Time: every lease and retention comparison uses the database's `now()`, one clock for all
 * app hosts, so host clock skew cannot expire a lease early. Durations arrive as
 * milliseconds (`$n::int8 * interval '1 millisecond'`).
 *
 * Fencing: every write after the claim carries `lock_version = $token` in its WHERE clause
 * (protocol.md Q3-Q5). Zero rows back means another worker holds a newer token; the caller
 * rolls back whatever it did in the same transaction.
 */
import { blobStatements, blobTableStatement } from './sql/blobs.js';
import { citusMaintenanceStatements, citusStatements } from './sql/citus.js';
import { claimStatements, partitionedClaimStatements } from './sql/claim.js';
import { completerStatements } from './sql/completer.js';
import { dashboardStatements } from './sql/dashboard.js';
import { fencedStatements } from './sql/fenced.js';
import { groupStatements } from './sql/group.js';
import { inspectStatements } from './sql/inspect.js';
import { migrateStatements, tableKind } from './sql/migrate.js';
import { operatorStatements } from './sql/operator.js';
import { partitionStatements } from './sql/partitions.js';
import { sweepStatements } from './sql/sweep.js';
import { tableNames } from './sql/table.js';

export { quoteTable } from './sql/table.js';
export { citusCatalog } from './sql/citus.js';

/** Statements for one table; each is documented where it is written, in `sql/`. */
export interface Statements {
  /** sql/migrate.ts */
  migrate: string[];
  tableKind: string;
  /** The `<table>_blobs` DDL, also in `migrate` (plain mode only: see {@link partitionedStatements}). */
  blobTable: string;
  /** sql/claim.ts */
  claim: string;
  readDone: string;
  readForUpdate: string;
  read: string;
  replaceExpired: string;
  /** sql/fenced.ts */
  takeOver: string;
  recordPhase: string;
  finish: string;
  extendLease: string;
  release: string;
  countFailure: string;
  discard: string;
  /** sql/group.ts: group commit's batched claim and finish (plain table). */
  groupClaim: string;
  groupFinish: string;
  batchRead: string;
  batchInsertDone: string;
  /** sql/sweep.ts */
  sweepCutoff: string;
  sweepPlan: string;
  sweepBatch: string;
  /** sql/blobs.ts: out-of-line response bodies in `<table>_blobs` (the default `BlobStore`). */
  blobPut: string;
  blobGet: string;
  blobDelete: string;
  /** sql/inspect.ts */
  inspect: string;
  stats: string;
  replication: string;
  /** sql/completer.ts */
  saveRequest: string;
  listAbandoned: string;
  discardAbandoned: string;
  /** sql/dashboard.ts */
  dashboardTimeline: string;
  dashboardStuck: string;
  dashboardOldest: string;
  dashboardPastRetention: string;
  dashboardFailing: string;
  dashboardWhy: string;
  /** sql/operator.ts */
  operatorRelease: string;
  operatorBlob: string;
  operatorForget: string;
}

/**
 * The statements that differ in partitioned mode (see {@link partitionedStatements}); every
 * other statement of {@link Statements} is shared, because each of them selects or updates
 * the one row of (scope, key) wherever it lives.
 */
export interface PartitionedStatements {
  /** sql/migrate.ts */
  migrate: string[];
  /** sql/claim.ts */
  lockKey: string;
  claim: string;
  replaceExpired: string;
  /** sql/partitions.ts */
  today: string;
  listPartitions: string;
  createPartition(name: string, fromDay: string, toDay: string): string;
  lockPartition(name: string): string;
  partitionRows(name: string): string;
  dropPartition(name: string): string;
  setLockTimeout: string;
}

/**
 * Builds the statements for `table` (default `idempotency_keys`, the name protocol.md uses).
 * @throws {Error} for an invalid or too long table name
 */
export function statements(table: string): Statements {
  const names = tableNames(table);
  return {
    migrate: migrateStatements(names, 'plain'),
    tableKind,
    blobTable: blobTableStatement(names),
    ...claimStatements(names),
    ...fencedStatements(names),
    ...groupStatements(names),
    ...sweepStatements(names),
    ...blobStatements(names),
    ...inspectStatements(names),
    ...completerStatements(names),
    ...dashboardStatements(names),
    ...operatorStatements(names),
  };
}

/**
 * Partitioned mode (protocol.md K16): the table is
 * range-partitioned by `created_at`, one partition per UTC day named `<table>_pYYYYMMDD`,
 * created ahead of time; retention drops whole partitions, so expiry leaves no dead tuples.
 *
 * The pitfall: a unique index on a partitioned table must include the partition key, so the
 * primary key is (scope, key, created_at) and PostgreSQL no longer enforces one row per
 * (scope, key): a claim just before midnight and its retry just after would land in two
 * partitions and both "succeed". So the claim here does not rely on an index. It runs in one
 * transaction that first takes a transaction-scoped advisory lock on a hash of (table, scope,
 * key) (`lockKey`), then looks the key up across every partition and inserts only when it is
 * absent (`claim`). Every insert of a key happens under that lock, and the lock is released
 * only after the inserting transaction is committed and visible, so the lookup of the next
 * holder (a new statement, a new snapshot taken after the lock was granted) sees it: at most
 * one row per (scope, key), whatever the partitions. A hash collision only makes two unrelated
 * keys wait for each other for one claim.
 *
 * Every other statement (takeover, phases, finish, heartbeat, release, discard, read) selects
 * the key by (scope, key) without `created_at`, so it finds the one row in whichever partition
 * it lives and is shared with the plain table unchanged.
 *
 * @throws {Error} for an invalid or too long table name
 */
export function partitionedStatements(table: string): PartitionedStatements {
  const names = tableNames(table);
  return {
    migrate: migrateStatements(names, 'partitioned'),
    ...partitionedClaimStatements(names),
    ...partitionStatements(names),
  };
}

/** Citus mode's own statements: distribution, and the per-shard sweep (sql/citus.ts). */
export type CitusStatements = ReturnType<typeof citusMaintenanceStatements>;

/**
 * Citus mode (`distributed: 'citus'`): `base` with the claim, the takeover and the replacement
 * past retention in the forms Citus accepts on a distributed table, and the statements of
 * distribution and the per-shard sweep. See sql/citus.ts.
 * @throws {Error} for an invalid or too long table name
 */
export function distributedStatements(table: string, base: Statements): { sql: Statements; citus: CitusStatements } {
  const names = tableNames(table);
  return { sql: { ...base, ...citusStatements(names, base) }, citus: citusMaintenanceStatements(names) };
}
