import type { TableNames } from './table.js';

/** The dashboard's reads (`idem dashboard`): read-only, bounded, never a body or a credential. */
export function dashboardStatements({ t }: TableNames) {
  const pastRetention = `created_at <= now() - $1::int8 * interval '1 millisecond'`;
  return {
    /** Keys created in the last 24 hours by hour (UTC) and current state. */
    dashboardTimeline: `SELECT to_char(date_trunc('hour', created_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD"T"HH24":00Z"') AS hour, state,
        count(*)::int8::text AS n
      FROM ${t} WHERE created_at > now() - interval '24 hours' GROUP BY 1, 2 ORDER BY 1, 2`,

    /**
     * Stuck keys: started, lease over (or released), within retention; oldest lease first.
     * $1 retention ms, $2 limit.
     */
    dashboardStuck: `SELECT scope, key, recovery_point, lock_version::text AS lock_version, locked_until, created_at
      FROM ${t} WHERE state = 'started' AND (locked_until IS NULL OR locked_until <= now()) AND NOT (${pastRetention})
      ORDER BY locked_until NULLS FIRST, created_at LIMIT $2`,

    /** The oldest keys within retention. $1 retention ms, $2 limit. */
    dashboardOldest: `SELECT scope, key, state, recovery_point, created_at FROM ${t} WHERE NOT (${pastRetention})
      ORDER BY created_at LIMIT $2`,

    /** Keys past retention not yet swept, oldest first. $1 retention ms, $2 limit. */
    dashboardPastRetention: `SELECT scope, key, state, created_at FROM ${t} WHERE ${pastRetention}
      ORDER BY created_at LIMIT $2`,
  };
}
