import type { TableNames } from './table.js';

/**
 * The writes after the claim, each fenced by `lock_version = $token` (protocol.md Q3-Q5):
 * zero rows back means another worker holds a newer token and nothing changed.
 */
export function fencedStatements({ t, nextToken }: TableNames) {
  return {
    /**
     * Take over an expired lease (protocol.md Q3), only if nobody else did in between: the
     * token must still be the one read, the key still started, the lease still expired.
     * A lease that ran out unreleased was a crashed attempt (the worker died, hung or was
     * killed): it counts as a failed attempt in the same statement, so `maxAttempts` ends a
     * crash loop (protocol.md K23); a released key (`released`, set by `release`) was counted
     * or excused by its worker and is not counted again. SET reads the row as it was, so the
     * count sees the old `released`. $1 scope, $2 key, $3 token read, $4 lease ms.
     */
    takeOver: `UPDATE ${t} SET locked_until = now() + $4::int8 * interval '1 millisecond', lock_version = ${nextToken},
        failed_attempts = failed_attempts + CASE WHEN released THEN 0 ELSE 1 END, released = false
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
        AND (locked_until IS NULL OR locked_until <= now())
      RETURNING lock_version::text AS lock_version, claim_id::text AS claim_id, recovery_point, phase_results, failed_attempts`,

    /**
     * An atomic phase's recovery point and result (protocol.md Q4), in the same transaction
     * as the phase's local effects; the lease is renewed with every phase.
     * $1 scope, $2 key, $3 token, $4 phase name, $5 result as JSON text, $6 lease ms.
     */
    recordPhase: `UPDATE ${t} SET recovery_point = $4,
        phase_results = phase_results || jsonb_build_object($4::text, $5::jsonb),
        locked_until = now() + $6::int8 * interval '1 millisecond'
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
      RETURNING 1 AS ok`,

    /**
     * Finish (protocol.md Q5): state done, response stored, lease cleared, in the same
     * transaction as the last effect. $1 scope, $2 key, $3 token, $4 status, $5 headers JSON,
     * $6 body bytes (NULL when out of line), $7 blob id (NULL when inline), $8 key id (NULL:
     * plaintext).
     */
    finish: `UPDATE ${t} SET state = 'done', recovery_point = 'finished', response_status = $4,
        response_headers = $5::jsonb, response_body = $6, response_body_ref = $7, response_key_id = $8,
        locked_until = NULL, finished_at = now()
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
      RETURNING 1 AS ok`,

    /** Heartbeat: extend the lease (protocol.md H16). $1 scope, $2 key, $3 token, $4 lease ms. */
    extendLease: `UPDATE ${t} SET locked_until = now() + $4::int8 * interval '1 millisecond'
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
      RETURNING 1 AS ok`,

    /**
     * Release after a thrown error (protocol.md H10): the lease ends now (`locked_until =
     * now()`, not NULL), the recovery point stays, so the next retry takes over at once and
     * resumes (`takeOver` needs `locked_until <= now()`, true from this instant on). The end
     * time is kept so the completer's `listAbandoned` waits its `graceMs` after it, as after
     * an expired lease: the client that saw the throw is about to retry with the same key, and
     * must not find the key held by the completer (protocol.md K10, K12). `released` tells
     * the next takeover this attempt ended cleanly, not in a crash (protocol.md K23).
     * $1 scope, $2 key, $3 token.
     */
    release: `UPDATE ${t} SET locked_until = now(), released = true
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
      RETURNING 1 AS ok`,

    /**
     * An attempt failed (the handler threw): count it, keeping the lease, so the caller can
     * finish the key for good once it reached `maxAttempts` (protocol.md K5) or release it.
     * $1 scope, $2 key, $3 token. Returns the attempts failed so far.
     */
    countFailure: `UPDATE ${t} SET failed_attempts = failed_attempts + 1
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
      RETURNING failed_attempts`,

    /**
     * The request was rejected before any phase committed: delete the claim so the client can
     * fix the request and retry with the same key (protocol.md K10). A key with a
     * committed phase is never deleted (its effects exist); the caller releases it instead.
     * $1 scope, $2 key, $3 token.
     */
    discard: `DELETE FROM ${t}
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started' AND recovery_point = 'start'
      RETURNING 1 AS ok`,
  };
}
