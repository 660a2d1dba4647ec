/**
 * What the `idem` commands and the dashboard need of a store: the `operator` and `maintenance`
 * capabilities (protocol.md "Store capabilities") with the table reads they print, in the shapes
 * `idem/postgres` exports. `PostgresStore` and `MySqlStore` both are one; the PostgreSQL-only
 * modes (partitions, Citus) are optional and absent on MySQL.
 */
import type { DistributeResult, KeyInspection, PartitionOptions, StoreStats, SweepOptions, SweepPlan, SweepReport } from '../postgres/index.js';
import type { DashboardData, DashboardInspection } from '../postgres/dashboard.js';
import type { MaintenanceStore, OperatorStore } from '../store/capabilities.js';
import type { IdempotencyStore } from '../store/types.js';

/** The dashboard's reads: its overview and key inspector (no bodies, no phase results). */
export interface DashboardReads {
  dashboard(retentionMs?: number, limit?: number): Promise<DashboardData>;
  dashboardInspect(scope: string, key: string, retentionMs?: number): Promise<DashboardInspection | undefined>;
}

/** A store the CLI operates: operator writes, migration and sweep, and the operator's reads. */
export interface CliStore extends Omit<IdempotencyStore<unknown>, 'operate'>, OperatorStore, MaintenanceStore, DashboardReads {
  readonly table: string;
  /** Partitioned mode's options (PostgreSQL), else undefined. */
  readonly partitioning: Required<PartitionOptions> | undefined;
  /** `citus` in Citus mode (PostgreSQL), else undefined. */
  readonly distributed: 'citus' | undefined;
  tableMode(): Promise<'plain' | 'partitioned' | undefined>;
  sweepPlan(retentionMs?: number): Promise<SweepPlan>;
  sweepReport(options?: SweepOptions): Promise<SweepReport>;
  inspect(scope: string, key: string, retentionMs?: number): Promise<KeyInspection | undefined>;
  stats(retentionMs?: number): Promise<StoreStats>;
  /** PostgreSQL in Citus mode: distributes the tables (`idem migrate --distribute`). */
  distribute?(): Promise<DistributeResult>;
  /** PostgreSQL partitioned mode: creates the partitions ahead (`idem partitions`). */
  maintain?(): Promise<string[]>;
}
