import { CLAIMED_ROW, literal, quoteTable, ROW, type TableNames } from './table.js';

/** A row's retention flag: created at or before `now() - $n ms`. */
const retentionExpired = (param: string) => `created_at <= now() - ${param}::int8 * interval '1 millisecond' AS retention_expired`;

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
     * INSERT machinery made a replay cost about 0.65x a bare primary-key read, this read costs
     * about 1.0x (bench/, concurrency 16). Only a finished row within retention is answered
     * from it; anything else (absent, started, past retention) goes through `claim`, so the
     * claim stays the unique insert. $1 scope, $2 key, $3 retention ms.
     */
    readDone: `SELECT state, fingerprint, recovery_point, phase_results, lock_version::text AS lock_version, claim_id::text AS claim_id,
        response_status, response_headers, response_body, response_body_ref, response_key_id, created_at,
        ${retentionExpired('$3')}
      FROM ${t} WHERE scope = $1 AND key = $2`,

    /**
     * The conflict path's read after a lost race (protocol.md Q2). FOR UPDATE waits for a
     * transaction that is writing the row right now, so the state read is the newest one; the
     * lock is released at once (autocommit): the takeover is a compare-and-set on the token.
     * $1 scope, $2 key, $3 retention ms.
     */
    readForUpdate: `SELECT ${ROW}, ${retentionExpired('$3')}
      FROM ${t} WHERE scope = $1 AND key = $2 FOR UPDATE`,

    /** Plain read of one key (inspection). $1 scope, $2 key, $3 retention ms. */
    read: `SELECT ${ROW}, ${retentionExpired('$3')}
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
        failed_attempts = 0, request = NULL
      WHERE scope = $1 AND key = $2 AND lock_version = $6
        AND created_at <= now() - $5::int8 * interval '1 millisecond'
        AND (locked_until IS NULL OR locked_until <= now())
      RETURNING lock_version::text AS lock_version, claim_id::text AS claim_id`,
  };
}

/**
 * The claim in ONE round trip that costs a replay no more than a plain read (plain mode): a
 * plpgsql function `<table>_claim_v1`, created by `migrate()`, that runs the primary-key read
 * and, only when it finds no row, the claim's `INSERT … ON CONFLICT DO NOTHING`. Same inputs
 * and result columns as {@link claimStatement} (`kind` 'exists' or 'claimed'), same decisions
 * (protocol.md Q1, K3).
 *
 * Why a function and not the claim statement alone: a statement that holds an INSERT pays
 * for it on every run, insert or not (the executor opens the table's indexes for the
 * insert and its arbiter, and the statement takes a write lock), so the claim statement
 * run on a finished key did 0.56-0.72 of a bare primary-key read (bench/, pg, concurrency
 * 1-64); and the replay fast path that avoided it (`readDone`) cost every new request a
 * second round trip. In the function the INSERT is planned and run only when the read
 * missed, so a replay is one read and a new request one statement.
 *
 * Each statement of a VOLATILE function takes its own snapshot (READ COMMITTED), so the read
 * and the insert are not one snapshot: a row committed by a concurrent claim between them
 * makes the insert do nothing, and the function returns a row of NULLs (`kind` NULL), which
 * the caller treats as the claim statement's "no row back" (read it fresh with
 * `readForUpdate`, protocol.md Q2). A row deleted in between (discarded, swept) is simply
 * claimed. A finished row carries no lease (`locked_until` NULL), so its lease arithmetic is
 * skipped.
 *
 * A table migrated by an earlier version has no function until `migrate()` runs again; the
 * store then falls back to `readDone` + `claim` (src/postgres/claim.ts).
 */
export function claimFunctionStatements({ table, t }: TableNames) {
  // Versioned: a later change of its result columns (which CREATE OR REPLACE refuses) gets a
  // new name, so processes of both versions keep working through a rolling upgrade.
  const fn = quoteTable(`${table}_claim_v1`);
  return {
    /** Created (or replaced: the upgrade path) by `migrate()` in its transaction, plain mode. */
    claimFunction: `CREATE OR REPLACE FUNCTION ${fn}(p_scope text, p_key text, p_fingerprint bytea, p_lease_ms int8, p_retention_ms int8,
        OUT kind text, OUT scope text, OUT key text, OUT fingerprint bytea, OUT state text, OUT recovery_point text,
        OUT phase_results jsonb, OUT lock_version text, OUT claim_id text, OUT lease_expired boolean,
        OUT lease_remaining_ms float8, OUT response_status int, OUT response_headers jsonb, OUT response_body bytea,
        OUT response_body_ref text, OUT response_key_id text, OUT created_at timestamptz, OUT retention_expired boolean)
      LANGUAGE plpgsql VOLATILE AS $fn$
      #variable_conflict use_column
      BEGIN
        SELECT 'exists', r.scope, r.key, r.fingerprint, r.state, r.recovery_point, r.phase_results, r.lock_version::text, r.claim_id::text,
            (r.locked_until IS NULL OR r.locked_until <= now()),
            CASE WHEN r.locked_until IS NULL THEN 0 ELSE GREATEST(0, EXTRACT(EPOCH FROM (r.locked_until - now())) * 1000)::float8 END,
            r.response_status, r.response_headers, r.response_body, r.response_body_ref, r.response_key_id, r.created_at,
            r.created_at <= now() - p_retention_ms * interval '1 millisecond'
          INTO kind, scope, key, fingerprint, state, recovery_point, phase_results, lock_version, claim_id, lease_expired,
            lease_remaining_ms, response_status, response_headers, response_body, response_body_ref, response_key_id, created_at,
            retention_expired
          FROM ${t} r WHERE r.scope = p_scope AND r.key = p_key;
        IF FOUND THEN
          RETURN;
        END IF;
        INSERT INTO ${t} AS r (scope, key, fingerprint, locked_until)
          VALUES (p_scope, p_key, p_fingerprint, now() + p_lease_ms * interval '1 millisecond')
          ON CONFLICT (scope, key) DO NOTHING
          RETURNING 'claimed', r.lock_version::text, r.claim_id::text INTO kind, lock_version, claim_id;
      END
      $fn$`,

    /** The call. $1 scope, $2 key, $3 fingerprint, $4 lease ms, $5 retention ms. */
    claimOne: `SELECT * FROM ${fn}($1, $2, $3, $4::int8, $5::int8)`,
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
