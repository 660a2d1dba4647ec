import type { TableNames } from './table.js';

/**
 * An operator's writes on one key (protocol.md K40-K42), each one statement fenced by the token
 * the operator read and by the state it needs; zero rows back: the key is not as read, nothing
 * changed. Both draw a new token, so whoever held the old one is fenced at its next write
 * (protocol.md K8), and both record the operator's note on the row.
 */
export function operatorStatements({ t, nextToken }: TableNames) {
  return {
    /**
     * Release (protocol.md K41): the lease ends now and the key is marked released (the next
     * takeover counts no crash, K23); the recovery point and phase results stay. Without force
     * ($5 false) only a lease that already ended. $1 scope, $2 key, $3 token read, $4 note,
     * $5 force.
     */
    operatorRelease: `UPDATE ${t} SET locked_until = now(), released = true, lock_version = ${nextToken}, operator_note = $4
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
        AND ($5::boolean OR locked_until IS NULL OR locked_until <= now())
      RETURNING lock_version::text AS lock_version`,

    /**
     * Forget (protocol.md K42): a finished key becomes a released claim at recovery point
     * `start` with nothing stored, under a new token and claim id; the fingerprint and
     * `created_at` stay. The next request with the same key and body takes it over and runs.
     * $1 scope, $2 key, $3 token read, $4 note. The caller reads the body's blob id first
     * (`operatorBlob`) and deletes the blob once this matched (protocol.md K14).
     */
    operatorBlob: `SELECT response_body_ref FROM ${t} WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'done'`,
    operatorForget: `UPDATE ${t} SET state = 'started', recovery_point = 'start', phase_results = '{}'::jsonb,
        locked_until = now(), released = true, lock_version = ${nextToken}, claim_id = gen_random_uuid(),
        response_status = NULL, response_headers = NULL, response_body = NULL, response_body_ref = NULL,
        response_key_id = NULL, finished_at = NULL, failed_attempts = 0, request = NULL, operator_note = $4
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'done'
      RETURNING lock_version::text AS lock_version`,
  };
}
