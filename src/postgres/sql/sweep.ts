import type { TableNames } from './table.js';

/** Retention (protocol.md K6) on a plain table: a fixed cutoff, a dry run, and key-range batches. */
export function sweepStatements({ t }: TableNames) {
  return {
    /**
     * The retention cutoff, fixed once when a sweep starts: rows created at or before it are
     * past retention. A sweep works towards a fixed point, so it ends even while new rows keep
     * expiring, and its total is known in advance (the CLI's progress bar). $1 retention ms.
     */
    sweepCutoff: `SELECT (extract(epoch FROM now() - $1::int8 * interval '1 millisecond') * 1000000)::int8::text AS cutoff_us`,

    /**
     * What a sweep up to the cutoff would find (dry run, progress total): rows created at or
     * before it, and how many of those may go (lease not valid). $1 cutoff µs.
     */
    sweepPlan: `SELECT count(*)::int8::text AS expired,
        count(*) FILTER (WHERE locked_until IS NULL OR locked_until <= now())::int8::text AS sweepable
      FROM ${t} WHERE created_at <= 'epoch'::timestamptz + $1::int8 * interval '1 microsecond'`,

    /**
     * One retention batch (protocol.md K6), by key range: the next `$5` rows past the cutoff in
     * (created_at, scope, key) order after the cursor, so each batch resumes where the last one
     * ended and no row is scanned twice (no `ctid`: key ranges also work on PostgreSQL-compatible
     * distributed databases). The created_at index gives the order, an incremental sort breaks
     * ties by primary key, the LIMIT stops the scan.
     *
     * Concurrency: FOR UPDATE SKIP LOCKED never waits on a row a live claim or another sweeper
     * holds, and two sweepers never delete the same row (a row one of them locked is skipped by
     * the other; deleted rows are gone). A key whose lease is still valid is left alone (checked
     * again on the locked row): deleting it would let a retry run the work a second time. The
     * cursor moves past the whole batch, skipped rows included, so a run cannot loop on them.
     *
     * Times travel as integer epoch microseconds (exact, unlike a JS Date's milliseconds).
     * $1 cutoff µs, $2 cursor created_at µs, $3 cursor scope, $4 cursor key, $5 batch size.
     * Returns the rows deleted, the rows in the batch and the new cursor (NULL when none).
     */
    sweepBatch: `WITH batch AS (
        SELECT scope, key, created_at FROM ${t}
        WHERE created_at <= 'epoch'::timestamptz + $1::int8 * interval '1 microsecond'
          AND created_at >= 'epoch'::timestamptz + $2::int8 * interval '1 microsecond'
          AND (created_at, scope, key) > ('epoch'::timestamptz + $2::int8 * interval '1 microsecond', $3::text, $4::text)
        ORDER BY created_at, scope, key LIMIT $5
        FOR UPDATE SKIP LOCKED
      ), deleted AS (
        DELETE FROM ${t} AS k USING batch
        WHERE k.scope = batch.scope AND k.key = batch.key AND k.created_at = batch.created_at
          AND (k.locked_until IS NULL OR k.locked_until <= now())
        RETURNING 1
      ), last AS (
        SELECT scope, key, (extract(epoch FROM created_at) * 1000000)::int8::text AS created_us
        FROM batch ORDER BY created_at DESC, scope DESC, key DESC LIMIT 1
      )
      SELECT (SELECT count(*) FROM deleted)::int AS deleted, (SELECT count(*) FROM batch)::int AS scanned,
        last.created_us, last.scope, last.key
      FROM (SELECT 1) AS one LEFT JOIN last ON true`,
  };
}
