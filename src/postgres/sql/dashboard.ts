import type { TableNames } from './table.js';

/** The dashboard's reads (`idem dashboard`): read-only, bounded, never a body or a credential. */
export function dashboardStatements({ t }: TableNames) {
  const pastRetention = `created_at <= now() - $1::int8 * interval '1 millisecond'`;
  // The stored response's body, only when it is a plaintext inline problem+json document of at
  // most 8 KiB: the dashboard reads its `type` member and nothing else (dashboard.ts).
  const problemBody = `CASE WHEN response_key_id IS NULL AND octet_length(response_body) <= 8192
      AND jsonb_typeof(response_headers) = 'array'
      AND EXISTS (SELECT 1 FROM jsonb_array_elements(response_headers) h
        WHERE jsonb_typeof(h) = 'array' AND lower(h->>0) = 'content-type' AND h->>1 ILIKE 'application/problem+json%')
    THEN response_body END AS problem_body`;
  return {
    /** Keys created in the last 24 hours by hour (UTC) and current state. */
    dashboardTimeline: `SELECT to_char(date_trunc('hour', created_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD"T"HH24":00Z"') AS hour, state,
        count(*)::int8::text AS n
      FROM ${t} WHERE created_at > now() - interval '24 hours' GROUP BY 1, 2 ORDER BY 1, 2`,

    /**
     * Stuck keys: started, lease over (or released), within retention; oldest lease first.
     * $1 retention ms, $2 limit.
     */
    dashboardStuck: `SELECT scope, key, recovery_point, lock_version::text AS lock_version, locked_until, created_at,
        failed_attempts, request IS NOT NULL AS has_request
      FROM ${t} WHERE state = 'started' AND (locked_until IS NULL OR locked_until <= now()) AND NOT (${pastRetention})
      ORDER BY locked_until NULLS FIRST, created_at LIMIT $2`,

    /** The oldest keys within retention. $1 retention ms, $2 limit. */
    dashboardOldest: `SELECT scope, key, state, recovery_point, created_at, failed_attempts FROM ${t} WHERE NOT (${pastRetention})
      ORDER BY created_at LIMIT $2`,

    /** Keys past retention not yet swept, oldest first. $1 retention ms, $2 limit. */
    dashboardPastRetention: `SELECT scope, key, state, created_at, failed_attempts FROM ${t} WHERE ${pastRetention}
      ORDER BY created_at LIMIT $2`,

    /**
     * Why keys fail: keys within retention with failed attempts (as the store counts them) or
     * finished with a 5xx response, newest first, with the stored problem document when there
     * is one. $1 retention ms, $2 limit.
     */
    dashboardFailing: `SELECT scope, key, state, recovery_point, created_at, failed_attempts, response_status, ${problemBody}
      FROM ${t} WHERE (failed_attempts > 0 OR response_status >= 500) AND NOT (${pastRetention})
      ORDER BY created_at DESC LIMIT $2`,

    /** The "why" of one key for the inspector: failed attempts, problem document, request stored. $1 scope, $2 key. */
    dashboardWhy: `SELECT failed_attempts, request IS NOT NULL AS has_request, ${problemBody}
      FROM ${t} WHERE scope = $1 AND key = $2`,
  };
}
