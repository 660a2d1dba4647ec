import { CLAIMED_ROW, literal, ROW, type TableNames } from './table.js';

/**
 * A row's retention by the database clock: the flag (created at or before `now() - $n ms`) and
 * the ms left (`retention_remaining_ms`, ≤ 0 past it), which bounds the replay cache (protocol.md K20).
 * `date_part` (double precision) rather than `EXTRACT` (numeric since PostgreSQL 14): the same
 * value, and a replay's read did about 1.2x the throughput with it (pgbench, concurrency 16).
 */
const retentionExpired = (param: string) =>
  `created_at <= now() - ${param}::int8 * interval '1 millisecond' AS retention_expired, (date_part('epoch', created_at - now()) * 1000 + ${param}::int8) AS retention_remaining_ms`;

/**
 * The claim (protocol.md Q1) and, on conflict, the existing row (protocol.md Q2), in ONE round
 * trip: the common new request and the common retry each cost one statement. One builder for
 * both modes; they differ only in what makes the insert exclusive.
 *
 * Read first: the primary-key read (`existing`) runs before the INSERT, and the INSERT is
 * attempted only when no row is visible. A retry then costs a plain index read, without
 * the insert attempt and without drawing a token or a claim_id for nothing (pgbench
 * -M prepared, concurrency 16: about 1.2x the throughput of insert-first on an existing key).
 *
 * Plain mode: the claim is its own autocommit statement, so concurrent duplicates see it at
 * once, and exclusivity comes from the unique insert alone (`ON CONFLICT DO NOTHING`).
 * Race: when the conflicting row was committed by a concurrent claim after this
 * statement's snapshot was taken, `existing` is empty, the INSERT waits for it and does
 * nothing, and zero rows come back: the caller reads again with `readForUpdate` (a fresh
 * snapshot). A row visible in the snapshot but deleted since (discarded, swept) is
 * reported as it was; the caller's next step (a fenced takeover or replacement) finds it
 * gone and claims again.
 *
 * Partitioned mode: no unique index spans the partitions, so the statement runs under
 * `lockKey` (see `partitionedClaimStatements`): the existing row from any partition, or a new row
 * when there is none, and always one row back.
 *
 * $1 scope, $2 key, $3 fingerprint, $4 lease ms, $5 retention ms.
 */
export function claimStatement(t: string, mode: 'plain' | 'partitioned'): string {
  return `WITH existing AS (
        SELECT ${ROW}, ${retentionExpired('$5')}
        FROM ${t} WHERE scope = $1 AND key = $2
      ), claimed AS (
        INSERT INTO ${t} (scope, key, fingerprint, locked_until)
        SELECT $1, $2, $3, now() + $4::int8 * interval '1 millisecond'
        WHERE NOT EXISTS (SELECT 1 FROM existing)${mode === 'plain' ? '\n        ON CONFLICT (scope, key) DO NOTHING' : ''}
        RETURNING lock_version, claim_id
      )
      ${CLAIMED_ROW}
      FROM claimed
      UNION ALL
      SELECT 'exists', existing.* FROM existing`;
}

/** The reads of the claim path, and the replacement of a row past retention (plain mode). */
export function claimStatements({ t, nextToken }: TableNames) {
  return {
    claim: claimStatement(t, 'plain'),

    /**
     * Replay fast path, run before the claim: the primary-key read a retry of a finished key
     * needs, and nothing more. A finished row holds no lease (finish sets `locked_until` NULL),
     * so the lease arithmetic of {@link ROW} is left out; that arithmetic and the claim's
     * INSERT machinery made a replay cost about 0.65x a bare primary-key read (bench/,
     * concurrency 16). Lean: the five columns a replay needs (the state, the fingerprint
     * compared on every replay, the response) as the raw read has them, and everything else
     * the record carries in ONE json column `record`: [token, claim id, created_at (ISO text,
     * µs, read to the ms as a timestamptz is), retention ms left, out-of-line body ref, key id,
     * phase results]. No `recovery_point` (a finished row's is always `finished`). The driver
     * pays per column of every result (a field name decoded, a parser looked up, a value
     * converted): pg's parsing of the thirteen-column form took about 16 µs per replay, of this
     * one about 11, of the raw five columns about 10 (bench/notes.md, "Replay read").
     * Retention is in the WHERE clause: a row past it is not returned, so only a finished row
     * within retention is answered from here; anything else (absent, started, past retention)
     * goes through `claim`, which stays the unique insert. $1 scope, $2 key, $3 retention ms.
     */
    readDone: `SELECT state, fingerprint, response_status, response_headers, response_body,
        json_build_array(lock_version::text, claim_id, created_at, date_part('epoch', created_at - now()) * 1000 + $3::int8,
          response_body_ref, response_key_id, phase_results) AS record
      FROM ${t} WHERE scope = $1 AND key = $2 AND created_at > now() - $3::int8 * interval '1 millisecond'`,

    /**
     * The conflict path's read after a lost race (protocol.md Q2). FOR UPDATE waits for a
     * transaction that is writing the row right now, so the state read is the newest one; the
     * lock is released at once (autocommit): the takeover is a compare-and-set on the token.
     * $1 scope, $2 key, $3 retention ms.
     */
    readForUpdate: `SELECT ${ROW}, ${retentionExpired('$3')}
      FROM ${t} WHERE scope = $1 AND key = $2 FOR UPDATE`,

    /** Plain read of one key (inspection). $1 scope, $2 key, $3 retention ms. */
    read: `SELECT ${ROW}, ${retentionExpired('$3')}, operator_note
      FROM ${t} WHERE scope = $1 AND key = $2`,

    /**
     * A row past retention counts as absent (protocol.md H18): replace it with a fresh claim,
     * fenced on the token read, so two claimers cannot both replace it. The token keeps
     * increasing, so a worker still holding the old row's token cannot write into the new one.
     * A row whose lease is still valid is not replaced (its worker is alive; the engine keeps
     * retention longer than any lease can last). The old request snapshot goes too: kept, a
     * completer would run the old request under the new claim and store its response for the
     * new request (found by the model, docs/model, mutant MUT_REPLACE_KEEPS_REQUEST).
     * $1 scope, $2 key, $3 fingerprint, $4 lease ms, $5 retention ms, $6 token read.
     */
    replaceExpired: `UPDATE ${t} SET fingerprint = $3, state = 'started', recovery_point = 'start',
        phase_results = '{}'::jsonb, locked_until = now() + $4::int8 * interval '1 millisecond',
        lock_version = ${nextToken}, claim_id = gen_random_uuid(), response_status = NULL, response_headers = NULL,
        response_body = NULL, response_body_ref = NULL, response_key_id = NULL, created_at = now(), finished_at = NULL,
        failed_attempts = 0, released = false, request = NULL, operator_note = NULL
      WHERE scope = $1 AND key = $2 AND lock_version = $6
        AND created_at <= now() - $5::int8 * interval '1 millisecond'
        AND (locked_until IS NULL OR locked_until <= now())
      RETURNING lock_version::text AS lock_version, claim_id::text AS claim_id`,
  };
}

/** The claim path of partitioned mode; see `partitionedStatements` in sql.ts for why. */
export function partitionedClaimStatements({ table, t }: TableNames) {
  return {
    /**
     * The per-key claim lock, held until the claim's transaction ends. Run it as a statement
     * of its own before `claim`: a statement's snapshot is taken when it starts, so a lookup in
     * the same statement could miss a row committed while it waited for the lock.
     * $1 scope, $2 key.
     */
    lockKey: `SELECT pg_advisory_xact_lock(hashtextextended(${literal(table)} || '/' || $1::text || '/' || $2::text, 0))`,

    claim: claimStatement(t, 'partitioned'),

    /**
     * A row past retention counts as absent: delete it and insert the new claim, under
     * `lockKey`, fenced on the token read (and only while its lease is not valid). A delete and
     * an insert rather than an UPDATE of created_at: that would move the row to another
     * partition, and a stale worker's concurrent fenced UPDATE would then fail with a
     * serialization error instead of matching no row. $1 scope, $2 key, $3 fingerprint,
     * $4 lease ms, $5 retention ms, $6 token read.
     */
    replaceExpired: `WITH gone AS (
        DELETE FROM ${t}
        WHERE scope = $1 AND key = $2 AND lock_version = $6
          AND created_at <= now() - $5::int8 * interval '1 millisecond'
          AND (locked_until IS NULL OR locked_until <= now())
        RETURNING 1
      )
      INSERT INTO ${t} (scope, key, fingerprint, locked_until)
      SELECT $1, $2, $3, now() + $4::int8 * interval '1 millisecond' WHERE EXISTS (SELECT 1 FROM gone)
      RETURNING lock_version::text AS lock_version, claim_id::text AS claim_id`,
  };
}
