import type { TableNames } from './table.js';

/** The operator's reads: one key in full (`idem inspect`) and table health (`idem stats`). */
export function inspectStatements({ t }: TableNames) {
  return {
    /**
     * Everything about one key for an operator (`idem inspect`), past retention or not, with
     * the response summarised (status, headers, body size) rather than returned.
     * $1 scope, $2 key, $3 retention ms.
     */
    inspect: `SELECT scope, key, encode(fingerprint, 'hex') AS fingerprint, state, recovery_point, phase_results,
        lock_version::text AS lock_version, claim_id::text AS claim_id, locked_until,
        (locked_until IS NULL OR locked_until <= now()) AS lease_expired,
        GREATEST(0, EXTRACT(EPOCH FROM (locked_until - now())) * 1000)::float8 AS lease_remaining_ms,
        response_status, response_headers, octet_length(response_body) AS response_bytes, response_body_ref, response_key_id,
        created_at, finished_at, created_at <= now() - $3::int8 * interval '1 millisecond' AS retention_expired, operator_note
      FROM ${t} WHERE scope = $1 AND key = $2`,

    /**
     * Table health in one scan (`idem stats`): rows by state, the oldest row, rows past
     * retention not yet swept (sweepable: lease not valid), and keys in progress whose lease ran
     * out within retention (abandoned: the next retry, or a completer, takes them over).
     * $1 retention ms.
     */
    stats: `SELECT count(*)::int8::text AS total,
        count(*) FILTER (WHERE state = 'started')::int8::text AS started,
        count(*) FILTER (WHERE state = 'done')::int8::text AS done,
        min(created_at) AS oldest,
        count(*) FILTER (WHERE created_at <= now() - $1::int8 * interval '1 millisecond'
          AND (locked_until IS NULL OR locked_until <= now()))::int8::text AS expired_unswept,
        count(*) FILTER (WHERE state = 'started' AND (locked_until IS NULL OR locked_until <= now())
          AND created_at > now() - $1::int8 * interval '1 millisecond')::int8::text AS abandoned,
        count(*) FILTER (WHERE locked_until > now())::int8::text AS live_leases
      FROM ${t}`,

    /**
     * Streaming standbys of this server and how many are synchronous (a
     * promoted asynchronous standby may have lost acknowledged keys, and their retries run
     * again). `sync_state` is NULL without pg_read_all_stats: counted as unknown.
     */
    replication: `SELECT count(*)::int AS standbys,
        count(*) FILTER (WHERE sync_state IN ('sync', 'quorum'))::int AS synchronous,
        count(*) FILTER (WHERE sync_state IS NULL)::int AS unknown,
        current_setting('synchronous_commit') AS synchronous_commit
      FROM pg_stat_replication`,
  };
}
