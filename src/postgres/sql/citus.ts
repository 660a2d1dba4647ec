import { literal, type TableNames } from './table.js';

/**
 * Citus mode (`distributed: 'citus'`): the statements that differ when the key table is a
 * Citus distributed table, distributed by `scope`. Every other statement of `Statements` is
 * a single-shard (router) query as it stands, since each names `scope = $1`, and is shared
 * with plain mode unchanged. Plain mode never sees these texts.
 *
 * What Citus refuses, and what is done instead:
 * - a volatile function (`nextval`, `gen_random_uuid()`) in an UPDATE of a distributed table:
 *   the takeover and the replacement past retention draw them in a scalar subquery, which the
 *   coordinator evaluates first and hands to the single-shard UPDATE as a constant;
 * - `FOR UPDATE SKIP LOCKED` in a query over many shards: the sweep runs one batch on every
 *   shard at once through `run_command_on_shards`, each a plain PostgreSQL statement on its
 *   own shard, where the lock-skipping works as on one node.
 *
 * The claim is insert-first here. The read-first CTE of plain mode runs as several steps
 * through the coordinator; one `INSERT … ON CONFLICT DO NOTHING RETURNING` is one router
 * statement, and a conflict (zero rows) goes to the claim path's existing fresh read
 * (`readForUpdate`). A retry of a finished key never reaches it: `readDone` answers first.
 */
export function citusStatements(
  { t, nextToken }: TableNames,
  base: { takeOver: string; replaceExpired: string; operatorRelease: string; operatorForget: string },
) {
  // Drawn as uncorrelated scalar subqueries, which Citus plans apart and evaluates on the
  // coordinator, so tokens come from the coordinator's sequence as every INSERT's default
  // does. A CTE `WITH drawn AS (SELECT nextval(…))` is accepted too, but once the UPDATE is
  // itself a CTE (as wait mode's notify wrapper makes it) Citus pushes it down with the UPDATE
  // and the worker's own sequence range (from 2^48 per node) hands out the token.
  const drawn = (statement: string, name: string) => {
    const out = statement
      .replace(`lock_version = ${nextToken}`, `lock_version = (SELECT ${nextToken})`)
      .replace('claim_id = gen_random_uuid()', 'claim_id = (SELECT gen_random_uuid())');
    if (out === statement) throw new Error(`idem/postgres: ${name} changed shape (no token drawn in its UPDATE)`);
    return out;
  };
  return {
    /**
     * The claim (protocol.md Q1), insert-first: the new row's token and claim id, or zero rows
     * when the key exists (the caller reads it with `readForUpdate`, protocol.md Q2).
     * $1 scope, $2 key, $3 fingerprint, $4 lease ms, $5 retention ms (a new row is within
     * retention: only echoed, so that both modes bind the same five parameters).
     */
    claim: `INSERT INTO ${t} (scope, key, fingerprint, locked_until)
      VALUES ($1, $2, $3, now() + $4::int8 * interval '1 millisecond')
      ON CONFLICT (scope, key) DO NOTHING
      RETURNING 'claimed' AS kind, lock_version::text AS lock_version, claim_id::text AS claim_id, $5::int8 AS retention_ms`,

    /** The takeover of sql/fenced.ts, its token drawn in a subquery; same parameters. */
    takeOver: drawn(base.takeOver, 'takeOver'),

    /** The replacement past retention of sql/claim.ts, token and claim id drawn in subqueries; same parameters. */
    replaceExpired: drawn(base.replaceExpired, 'replaceExpired'),

    /** The operator's writes of sql/operator.ts, token (and claim id) drawn in subqueries; same parameters. */
    operatorRelease: drawn(base.operatorRelease, 'operatorRelease'),
    operatorForget: drawn(base.operatorForget, 'operatorForget'),
  };
}

/**
 * The batch that `run_command_on_shards` runs on each shard of the key table, where `%1$s` is
 * the shard's name (Citus fills it in with `format`). The cutoff and batch size are filled in
 * beforehand by `format` on the coordinator from bound parameters (both `int8`, so `%s` is
 * exact and cannot inject), hence the doubled `%%1$s`.
 *
 * Per shard, the next `n` rows past the cutoff whose lease is not valid, oldest first,
 * skipping rows locked right now (a live claim, a phase in its transaction, another
 * sweeper); PostgreSQL checks the lease again on each row it locks. Deleted rows are gone and
 * rows with a valid lease are not selected, so no cursor is needed: a shard is done when its
 * batch comes back short. Blobs go by their shard-level foreign key cascade.
 * Returns `deleted,scanned` as text.
 */
const SHARD_BATCH = `WITH batch AS (
    SELECT scope, key FROM %%1$s
    WHERE created_at <= 'epoch'::timestamptz + %1$s::int8 * interval '1 microsecond'
      AND (locked_until IS NULL OR locked_until <= now())
    ORDER BY created_at LIMIT %2$s
    FOR UPDATE SKIP LOCKED
  ), deleted AS (
    DELETE FROM %%1$s AS k USING batch
    WHERE k.scope = batch.scope AND k.key = batch.key AND (k.locked_until IS NULL OR k.locked_until <= now())
    RETURNING 1
  )
  SELECT (SELECT count(*) FROM deleted)::text || ',' || (SELECT count(*) FROM batch)::text`;

/**
 * The catalog reads of the mode check, in either mode (`migrate` refuses a distributed table
 * opened without Citus mode): not table-specific, since they take the table as a parameter.
 */
export const citusCatalog = {
  /** The Citus extension's version, if installed; no row without it. */
  extension: `SELECT extversion FROM pg_extension WHERE extname = 'citus'`,

  /**
   * How `$1` is distributed: 'h' hash, 'n' reference or Citus-managed local table, no row
   * for a table Citus does not know. Run only where the extension exists (the catalog is
   * Citus's). $1 table name as given.
   */
  distribution: `SELECT partmethod::text AS method, column_to_column_name(logicalrelid, partkey) AS column, colocationid
      FROM pg_dist_partition WHERE logicalrelid = to_regclass($1)`,
};

/** Citus mode's distribution and retention statements, run through the coordinator. */
export function citusMaintenanceStatements({ t, blobs }: TableNames) {
  return {
    /** Distributes the key table by scope. */
    distributeKeys: `SELECT create_distributed_table(${literal(t)}, 'scope')`,

    /** Distributes `<table>_blobs` by scope, on the key table's shards (its foreign key needs them co-located). */
    distributeBlobs: `SELECT create_distributed_table(${literal(blobs)}, 'scope', colocate_with => ${literal(t)})`,

    /**
     * One retention batch on every shard at once (see `SHARD_BATCH`): a row per shard with
     * its id, whether it ran, and `deleted,scanned` (or the error). $1 cutoff µs, $2 batch size.
     */
    sweepShards: `SELECT shardid::text AS shard, success, result
      FROM run_command_on_shards(${literal(t)}::regclass, format(${literal(SHARD_BATCH)}, $1::int8, $2::int8))`,
  };
}
