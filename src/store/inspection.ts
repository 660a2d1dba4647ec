/**
 * What an operator sees of a store, whichever it is: one key in full (`idem inspect`) and the
 * table's health (`idem stats`). Each SQL store fills these from its own statements.
 */
import type { PhaseResults } from './types.js';

/** One key as an operator sees it (`PostgresStore.inspect`, `MySqlStore.inspect`). */
export interface KeyInspection {
  scope: string;
  key: string;
  state: string;
  /** SHA-256 fingerprint, hex. */
  fingerprint: string;
  recoveryPoint: string;
  phaseResults: PhaseResults;
  /** The fencing token (column `lock_version`), as decimal text. */
  token: string;
  claimId: string;
  lockedUntil: Date | null;
  leaseExpired: boolean;
  leaseRemainingMs: number;
  /**
   * The stored response, summarised: status, replayed headers (opened when sealed and the key
   * is configured; empty when it cannot be opened), body size in bytes as stored (ciphertext
   * when sealed), where the body lives, and the key id it was sealed with (null: plaintext).
   */
  response: {
    status: number;
    headers: Array<[string, string]>;
    bytes: number;
    storage: 'inline' | 'out-of-line';
    keyId: string | null;
  } | null;
  createdAt: Date;
  finishedAt: Date | null;
  retentionExpired: boolean;
  /** The last operator action on the row (protocol.md K40), as its JSON note, or null. */
  operatorNote: string | null;
}

/** Table health; see `PostgresStore.stats`, `MySqlStore.stats`. */
export interface StoreStats {
  total: number;
  started: number;
  done: number;
  oldest: Date | null;
  /** Past retention, lease not valid: the next sweep removes them. */
  expiredUnswept: number;
  /** Started, lease over, within retention: abandoned work the next retry (or a completer) takes over. */
  abandoned: number;
  liveLeases: number;
  /** Partitioned mode: partition names by day. */
  partitions?: Array<{ name: string; day: string; expired: boolean }>;
  /**
   * Streaming standbys of the server (`pg_stat_replication`), when it could be read: with
   * standbys and none synchronous, a failover can lose acknowledged keys and a retried
   * payment then runs again (see docs/reliability.md).
   */
  replication?: {
    standbys: number;
    /** Standbys in `sync` or `quorum` state. */
    synchronous: number;
    /** Standbys whose state this role may not read (needs pg_read_all_stats). */
    unknown: number;
    /** The server's `synchronous_commit` for this session. */
    synchronousCommit: string;
  };
}

/**
 * True when `replication` shows a failover could lose acknowledged keys: streaming standbys
 * and none synchronous, or `synchronous_commit` at `off` / `local` (which does not wait for
 * a standby). Unknown standby states count as synchronous (no false alarm).
 */
export function replicationAtRisk(replication: StoreStats['replication']): boolean {
  if (!replication || replication.standbys === 0) return false;
  if (replication.synchronous + replication.unknown === 0) return true;
  return replication.synchronousCommit === 'off' || replication.synchronousCommit === 'local';
}
