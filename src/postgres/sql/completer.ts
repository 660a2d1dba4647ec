import { ROW, type TableNames } from './table.js';

/** The statements of the completer (issue 4): request snapshots and abandoned keys. */
export function completerStatements({ t }: TableNames) {
  return {
    /**
     * The request snapshot of a key this worker holds, written right after the claim and
     * before the work starts, fenced by the token. So a started key without a snapshot never
     * ran its handler (when the completer is on).
     * $1 scope, $2 key, $3 token, $4 snapshot as JSON text.
     */
    saveRequest: `UPDATE ${t} SET request = $4::jsonb
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
      RETURNING 1 AS ok`,

    /**
     * Started keys within retention whose lease ended at least $1 ms ago, oldest first; uses
     * the partial index on started keys. A release ends the lease at its `now()`, so a released
     * key waits the grace too (a NULL lease on a started row is only left by a release of an
     * earlier version, and counts at once). A plain read: the
     * completer then takes each over with \`takeOver\`, a compare-and-set on the token, so two
     * completers (or a completer and a client retry) never both drive one key.
     * $1 grace ms, $2 retention ms, $3 limit.
     */
    listAbandoned: `SELECT ${ROW}, request FROM ${t}
      WHERE state = 'started'
        AND (locked_until IS NULL OR locked_until <= now() - $1::int8 * interval '1 millisecond')
        AND created_at > now() - $2::int8 * interval '1 millisecond'
      ORDER BY locked_until NULLS FIRST LIMIT $3`,

    /**
     * Completer: deletes a listed key on which nothing ran, in one compare-and-set: still the
     * token listed, started, at 'start', no request stored and no valid lease. Deciding on the
     * listing and discarding after a takeover instead races with a worker whose lease ran out
     * right after its claim: it can still save its request and call a downstream system with
     * its derived key before the takeover; a discard would then give the retry a new claim id,
     * so a new derived key, and a second downstream effect (found by the model, docs/model;
     * protocol.md K11).
     * $1 scope, $2 key, $3 token listed.
     */
    discardAbandoned: `DELETE FROM ${t}
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started' AND recovery_point = 'start'
        AND request IS NULL AND (locked_until IS NULL OR locked_until <= now())
      RETURNING 1 AS ok`,
  };
}
