/**
 * The MySQL store's operator statements: the fenced release and forget (protocol.md K40-K42),
 * the upgrade that adds their note column to a table made before them, the dashboard's reads,
 * and wait mode's poll (protocol.md K17). The forms follow sql.ts (no RETURNING: the new token
 * is drawn before the write and the write's outcome is its rows matched).
 */
import { earlier, epochMs, LEASE_OVER, NOW } from './sql-clock.js';

/** The stored response's headers and body, only when plaintext, inline and at most 8 KiB: the dashboard reads a problem document's `type` and nothing else. */
const PROBLEM = `CASE WHEN response_key_id IS NULL AND OCTET_LENGTH(response_body) <= 8192 THEN response_headers END AS problem_headers,
  CASE WHEN response_key_id IS NULL AND OCTET_LENGTH(response_body) <= 8192 THEN response_body END AS problem_body`;

/** The statements on the key table `t` (quoted). */
export function operatorStatements(t: string) {
  return {
    /** Whether the key table has the operator's note column yet. Values: table name (unqualified), database or NULL. */
    noteColumn: `SELECT COUNT(*) AS n FROM information_schema.columns
      WHERE table_name = ? AND table_schema = COALESCE(?, DATABASE()) AND column_name = 'operator_note'`,
    /** The upgrade of a table made before operator actions (MySQL has no ADD COLUMN IF NOT EXISTS). */
    addNoteColumn: `ALTER TABLE ${t} ADD COLUMN operator_note LONGTEXT NULL`,

    /**
     * Release (protocol.md K41): the lease ends now, the key is marked released (the next
     * takeover counts no crash, K23) under the new token; recovery point and phase results stay.
     * Without force only a lease that already ended.
     * Values: new token, note, scope, key, token read, force (0 or 1).
     */
    operatorRelease: `UPDATE ${t} SET locked_until = ${NOW}, released = 1, lock_version = ?, operator_note = ?
      WHERE scope = ? AND \`key\` = ? AND lock_version = ? AND state = 'started' AND (? = 1 OR ${LEASE_OVER})`,

    /** The finished key's blob id, read before a forget (its blob is deleted once the forget matched, K14). Values: scope, key, token read. */
    operatorBlob: `SELECT response_body_ref FROM ${t} WHERE scope = ? AND \`key\` = ? AND lock_version = ? AND state = 'done'`,

    /**
     * Forget (protocol.md K42): a finished key becomes a released claim at `start` with nothing
     * stored, under a new token and claim id; the fingerprint and `created_at` stay.
     * Values: new token, new claim id, note, scope, key, token read.
     */
    operatorForget: `UPDATE ${t} SET state = 'started', recovery_point = 'start', phase_results = '{}',
        locked_until = ${NOW}, released = 1, lock_version = ?, claim_id = ?,
        response_status = NULL, response_headers = NULL, response_body = NULL, response_body_ref = NULL,
        response_key_id = NULL, finished_at = NULL, failed_attempts = 0, request = NULL, operator_note = ?
      WHERE scope = ? AND \`key\` = ? AND lock_version = ? AND state = 'done'`,

    /**
     * Wait mode's poll (protocol.md K17): what a finish, release, discard or takeover changes
     * (no row: discarded or swept). One primary-key read. Values: scope, key.
     */
    pollKey: `SELECT lock_version, state, released, ${epochMs('locked_until')} AS locked_until_ms FROM ${t} WHERE scope = ? AND \`key\` = ?`,

    // ---- the dashboard's reads (idem dashboard): bounded, never a body but a small problem document

    /** Keys created in the last 24 hours by UTC hour and current state. */
    dashboardTimeline: `SELECT DATE_FORMAT(created_at, '%Y-%m-%dT%H:00Z') AS hour, state, COUNT(*) AS n
      FROM ${t} WHERE created_at > ${NOW} - INTERVAL 24 HOUR GROUP BY hour, state ORDER BY hour, state`,

    /** Started, lease over (or released), within retention; oldest lease first. Values: retention µs, limit. */
    dashboardStuck: `SELECT scope, \`key\`, recovery_point, CAST(lock_version AS CHAR) AS lock_version,
        ${epochMs('locked_until')} AS locked_until_ms, ${epochMs('created_at')} AS created_ms, failed_attempts,
        request IS NOT NULL AS has_request
      FROM ${t} WHERE state = 'started' AND ${LEASE_OVER} AND created_at > ${earlier}
      ORDER BY locked_until, created_at LIMIT ?`,

    /** The oldest keys within retention. Values: retention µs, limit. */
    dashboardOldest: `SELECT scope, \`key\`, state, recovery_point, ${epochMs('created_at')} AS created_ms, failed_attempts
      FROM ${t} WHERE created_at > ${earlier} ORDER BY created_at LIMIT ?`,

    /** Past retention, not yet swept, oldest first. Values: retention µs, limit. */
    dashboardPastRetention: `SELECT scope, \`key\`, state, ${epochMs('created_at')} AS created_ms, failed_attempts
      FROM ${t} WHERE created_at <= ${earlier} ORDER BY created_at LIMIT ?`,

    /** Within retention, with failed attempts or a stored 5xx, newest first. Values: retention µs, limit. */
    dashboardFailing: `SELECT scope, \`key\`, state, recovery_point, ${epochMs('created_at')} AS created_ms, failed_attempts,
        response_status, ${PROBLEM}
      FROM ${t} WHERE (failed_attempts > 0 OR response_status >= 500) AND created_at > ${earlier}
      ORDER BY created_at DESC LIMIT ?`,

    /** The inspector's "why" of one key. Values: scope, key. */
    dashboardWhy: `SELECT failed_attempts, request IS NOT NULL AS has_request, ${PROBLEM} FROM ${t} WHERE scope = ? AND \`key\` = ?`,
  };
}
