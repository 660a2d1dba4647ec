/**
 * Every SQL statement idem's PostgreSQL store issues, named and commented. Nothing else in
 * the code base writes SQL for the store. Statements take the (validated, quoted) table name;
 * parameters are always bound, never interpolated.
 *
 * Time: every lease and retention comparison uses the database's `now()`, one clock for all
 * app hosts, so host clock skew cannot expire a lease early. Durations arrive as
 * milliseconds (`$n::int8 * interval '1 millisecond'`).
 *
 * Fencing: every write after the claim carries `lock_version = $token` in its WHERE clause
 * (seed statements 3-5). Zero rows back means another worker holds a newer token; the caller
 * rolls back whatever it did in the same transaction.
 */

/**
 * The columns read back whenever a row is inspected, with lease and retention judged by the
 * database clock. The `claimed` half of the claim statement lists the same columns in the
 * same order.
 */
const ROW = `scope, key, fingerprint, state, recovery_point, phase_results, lock_version::text AS lock_version, claim_id::text AS claim_id,
  (locked_until IS NULL OR locked_until <= now()) AS lease_expired,
  GREATEST(0, EXTRACT(EPOCH FROM (locked_until - now())) * 1000)::float8 AS lease_remaining_ms,
  response_status, response_headers, response_body, created_at`;

/** Statements for one table. */
export interface Statements {
  migrate: string[];
  claim: string;
  readForUpdate: string;
  read: string;
  replaceExpired: string;
  takeOver: string;
  recordPhase: string;
  finish: string;
  extendLease: string;
  release: string;
  discard: string;
  sweepBatch: string;
  saveRequest: string;
  listAbandoned: string;
}

/** Quotes a table name after checking it is a plain (optionally schema-qualified) identifier. */
export function quoteTable(name: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$/.test(name)) {
    throw new Error(`Invalid table name ${JSON.stringify(name)}: use letters, digits and _ (optionally schema.table)`);
  }
  return name
    .split('.')
    .map((part) => `"${part}"`)
    .join('.');
}

/** Builds the statements for `table` (default `idempotency_keys`, the seed's name). */
export function statements(table: string): Statements {
  const t = quoteTable(table);
  const bare = table.replace('.', '_');
  // Fencing tokens come from one sequence per table, never from a per-row counter: a row
  // deleted (discarded, swept) and claimed again must not hand out a token that a stale
  // worker of the old row still holds.
  if (table.split('.').pop()!.length > 46) {
    throw new Error(`Table name ${JSON.stringify(table)} is too long: at most 46 characters, so that its token sequence "<table>_lock_version_seq" fits PostgreSQL's 63`);
  }
  const seq = quoteTable(`${table}_lock_version_seq`);
  const nextToken = `nextval('${seq.replaceAll("'", "''")}'::regclass)`;
  return {
    /**
     * Migration, run in one transaction under an advisory lock so two hosts starting at once
     * do not race on CREATE. Safe to run any number of times.
     *
     * Columns follow the seed, with these choices:
     * - `scope text` instead of `tenant_id bigint`: tenants are often UUIDs or API credential
     *   hashes; a scope is whatever the resolver returns (1-255 characters).
     * - `phase_results jsonb`: the recorded result of each completed atomic phase, so a
     *   takeover skips completed phases and still has their results.
     * - `response_headers jsonb`: the allow-listed response headers, as `[[name, value], ...]`.
     * - `lock_version` draws from a sequence (see `nextToken`), so tokens only ever grow, also
     *   across a delete and a new claim of the same key.
     * - `claim_id`: identifies one claim of the key, kept across takeovers, new when the key is
     *   claimed again after a discard or past retention. Derived keys for downstream calls
     *   include it, so a key reused after retention never gets the old downstream result.
     */
    migrate: [
      `SELECT pg_advisory_xact_lock(hashtext('idem:migrate:' || $1::text))`,
      `CREATE SEQUENCE IF NOT EXISTS ${seq}`,
      `CREATE TABLE IF NOT EXISTS ${t} (
        scope            text        NOT NULL CHECK (length(scope) BETWEEN 1 AND 255),
        key              text        NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
        fingerprint      bytea       NOT NULL CHECK (length(fingerprint) = 32),
        state            text        NOT NULL DEFAULT 'started' CHECK (state IN ('started', 'done')),
        recovery_point   text        NOT NULL DEFAULT 'start',
        phase_results    jsonb       NOT NULL DEFAULT '{}'::jsonb,
        locked_until     timestamptz,
        lock_version     bigint      NOT NULL DEFAULT ${nextToken},
        claim_id         uuid        NOT NULL DEFAULT gen_random_uuid(),
        response_status  int,
        response_headers jsonb,
        response_body    bytea,
        created_at       timestamptz NOT NULL DEFAULT now(),
        finished_at      timestamptz,
        PRIMARY KEY (scope, key)
      )`,
      `CREATE INDEX IF NOT EXISTS "${bare}_created_at_idx" ON ${t} (created_at)`,
      // Dropping the table drops its token sequence too.
      `ALTER SEQUENCE ${seq} OWNED BY ${t}.lock_version`,
      // Upgrade a table created by an earlier version: add claim_id; and where tokens came
      // from DEFAULT 0, move the sequence above every token in use, then switch the default.
      // Each step runs only when needed (no lock taken on an up-to-date table).
      `DO $$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '${t.replaceAll("'", "''")}'::regclass
            AND attname = 'claim_id' AND NOT attisdropped) THEN
          ALTER TABLE ${t} ADD COLUMN claim_id uuid NOT NULL DEFAULT gen_random_uuid();
        END IF;
        IF (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d
            JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
            WHERE d.adrelid = '${t.replaceAll("'", "''")}'::regclass AND a.attname = 'lock_version') NOT LIKE 'nextval(%' THEN
          PERFORM setval('${seq.replaceAll("'", "''")}'::regclass, GREATEST((SELECT max(lock_version) FROM ${t}), 0) + 1);
          ALTER TABLE ${t} ALTER COLUMN lock_version SET DEFAULT ${nextToken};
        END IF;
      END $$`,
      // Completer (issue 4): the request snapshot, NULL unless the app opted in. Added only
      // when missing, so an up-to-date table takes no lock.
      `DO $$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '${t.replaceAll("'", "''")}'::regclass
            AND attname = 'request' AND NOT attisdropped) THEN
          ALTER TABLE ${t} ADD COLUMN request jsonb;
        END IF;
      END $$`,
      // Completer: finds started keys by lease end without scanning finished rows. Partial,
      // so it holds only keys in flight (a few per worker), not the retained history.
      `CREATE INDEX IF NOT EXISTS "${bare}_started_idx" ON ${t} (locked_until) WHERE state = 'started'`,
    ],

    /**
     * Claim (seed statement 1) and, on conflict, the existing row (statement 2), in ONE round
     * trip: the common new request and the common retry each cost one statement.
     * The claim is its own autocommit statement, so concurrent duplicates see it at once.
     *
     * Race: when the conflicting row was committed by a concurrent claim after this
     * statement's snapshot was taken, the INSERT waits for it and does nothing, but the SELECT
     * half (same snapshot) cannot see it: zero rows come back and the caller reads again with
     * `readForUpdate` (a fresh snapshot).
     * $1 scope, $2 key, $3 fingerprint, $4 lease ms, $5 retention ms.
     */
    claim: `WITH claimed AS (
        INSERT INTO ${t} (scope, key, fingerprint, locked_until)
        VALUES ($1, $2, $3, now() + $4::int8 * interval '1 millisecond')
        ON CONFLICT (scope, key) DO NOTHING
        RETURNING lock_version, claim_id
      )
      SELECT 'claimed' AS outcome, NULL::text AS scope, NULL::text AS key, NULL::bytea AS fingerprint,
        NULL::text AS state, NULL::text AS recovery_point, NULL::jsonb AS phase_results,
        lock_version::text AS lock_version, claim_id::text AS claim_id, NULL::boolean AS lease_expired, NULL::float8 AS lease_remaining_ms, NULL::int AS response_status,
        NULL::jsonb AS response_headers, NULL::bytea AS response_body, NULL::timestamptz AS created_at,
        NULL::boolean AS retention_expired
      FROM claimed
      UNION ALL
      SELECT 'exists', ${ROW}, created_at <= now() - $5::int8 * interval '1 millisecond' AS retention_expired
      FROM ${t}
      WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM claimed)`,

    /**
     * The conflict path's read after a lost race (seed statement 2). FOR UPDATE waits for a
     * transaction that is writing the row right now, so the state read is the newest one; the
     * lock is released at once (autocommit): the takeover is a compare-and-set on the token.
     * $1 scope, $2 key, $3 retention ms.
     */
    readForUpdate: `SELECT ${ROW}, created_at <= now() - $3::int8 * interval '1 millisecond' AS retention_expired
      FROM ${t} WHERE scope = $1 AND key = $2 FOR UPDATE`,

    /** Plain read of one key (inspection). $1 scope, $2 key, $3 retention ms. */
    read: `SELECT ${ROW}, created_at <= now() - $3::int8 * interval '1 millisecond' AS retention_expired
      FROM ${t} WHERE scope = $1 AND key = $2`,

    /**
     * A row past retention counts as absent (conformance 18): replace it with a fresh claim,
     * fenced on the token read, so two claimers cannot both replace it. The token keeps
     * increasing, so a worker still holding the old row's token cannot write into the new one.
     * A row whose lease is still valid is not replaced (its worker is alive; the engine keeps
     * retention longer than any lease can last).
     * $1 scope, $2 key, $3 fingerprint, $4 lease ms, $5 retention ms, $6 token read.
     */
    replaceExpired: `UPDATE ${t} SET fingerprint = $3, state = 'started', recovery_point = 'start',
        phase_results = '{}'::jsonb, locked_until = now() + $4::int8 * interval '1 millisecond',
        lock_version = ${nextToken}, claim_id = gen_random_uuid(), response_status = NULL, response_headers = NULL,
        response_body = NULL, created_at = now(), finished_at = NULL
      WHERE scope = $1 AND key = $2 AND lock_version = $6
        AND created_at <= now() - $5::int8 * interval '1 millisecond'
        AND (locked_until IS NULL OR locked_until <= now())
      RETURNING lock_version::text AS lock_version, claim_id::text AS claim_id`,

    /**
     * Take over an expired lease (seed statement 3), only if nobody else did in between: the
     * token must still be the one read, the key still started, the lease still expired.
     * $1 scope, $2 key, $3 token read, $4 lease ms.
     */
    takeOver: `UPDATE ${t} SET locked_until = now() + $4::int8 * interval '1 millisecond', lock_version = ${nextToken}
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
        AND (locked_until IS NULL OR locked_until <= now())
      RETURNING lock_version::text AS lock_version, claim_id::text AS claim_id, recovery_point, phase_results`,

    /**
     * An atomic phase's recovery point and result (seed statement 4), in the same transaction
     * as the phase's local effects; the lease is renewed with every phase.
     * $1 scope, $2 key, $3 token, $4 phase name, $5 result as JSON text, $6 lease ms.
     */
    recordPhase: `UPDATE ${t} SET recovery_point = $4,
        phase_results = phase_results || jsonb_build_object($4::text, $5::jsonb),
        locked_until = now() + $6::int8 * interval '1 millisecond'
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
      RETURNING 1 AS ok`,

    /**
     * Finish (seed statement 5): state done, response stored, lease cleared, in the same
     * transaction as the last effect. $1 scope, $2 key, $3 token, $4 status, $5 headers JSON,
     * $6 body bytes.
     */
    finish: `UPDATE ${t} SET state = 'done', recovery_point = 'finished', response_status = $4,
        response_headers = $5::jsonb, response_body = $6, locked_until = NULL, finished_at = now()
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
      RETURNING 1 AS ok`,

    /** Heartbeat: extend the lease (conformance 16). $1 scope, $2 key, $3 token, $4 lease ms. */
    extendLease: `UPDATE ${t} SET locked_until = now() + $4::int8 * interval '1 millisecond'
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
      RETURNING 1 AS ok`,

    /**
     * Release after a thrown error (conformance 10): the lease ends now, the recovery point
     * stays, so the next retry takes over at once and resumes. $1 scope, $2 key, $3 token.
     */
    release: `UPDATE ${t} SET locked_until = NULL
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
      RETURNING 1 AS ok`,

    /**
     * The request was rejected before any phase committed: delete the claim so the client can
     * fix the request and retry with the same key (seed, "What gets stored"). A key with a
     * committed phase is never deleted (its effects exist); the caller releases it instead.
     * $1 scope, $2 key, $3 token.
     */
    discard: `DELETE FROM ${t}
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started' AND recovery_point = 'start'
      RETURNING 1 AS ok`,

    /**
     * One retention batch (seed step 6): rows created before now() - retention, oldest first,
     * by primary key; SKIP LOCKED so a sweep never waits on (or blocks) a live claim, and two
     * sweepers never delete the same rows. A key whose lease is still valid is left alone:
     * deleting it would let a retry run the work a second time. $1 retention ms, $2 batch size.
     */
    sweepBatch: `DELETE FROM ${t} WHERE (scope, key) IN (
        SELECT scope, key FROM ${t}
        WHERE created_at <= now() - $1::int8 * interval '1 millisecond'
          AND (locked_until IS NULL OR locked_until <= now())
        ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
  
    /**
     * Completer: the request snapshot of a key this worker holds, written right after the
     * claim and before the work starts, fenced by the token. So a started key without a
     * snapshot never ran its handler (when the completer is on).
     * $1 scope, $2 key, $3 token, $4 snapshot as JSON text.
     */
    saveRequest: `UPDATE ${t} SET request = $4::jsonb
      WHERE scope = $1 AND key = $2 AND lock_version = $3 AND state = 'started'
      RETURNING 1 AS ok`,

    /**
     * Completer: started keys within retention whose lease ended at least $1 ms ago, or was
     * released (NULL), oldest first; uses the partial index on started keys. A plain read:
     * the completer then takes each over with \`takeOver\`, a compare-and-set on the token,
     * so two completers (or a completer and a client retry) never both drive one key.
     * $1 grace ms, $2 retention ms, $3 limit.
     */
    listAbandoned: `SELECT ${ROW}, request FROM ${t}
      WHERE state = 'started'
        AND (locked_until IS NULL OR locked_until <= now() - $1::int8 * interval '1 millisecond')
        AND created_at > now() - $2::int8 * interval '1 millisecond'
      ORDER BY locked_until NULLS FIRST LIMIT $3`,
  };
}
