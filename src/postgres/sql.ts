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
  response_status, response_headers, response_body, response_body_ref, response_key_id, created_at`;

/**
 * The column definitions of the key table, shared by the plain table and the partitioned one
 * (each adds its own primary key). See `migrate` for the choices.
 */
function columns(nextToken: string): string {
  return `
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
        response_body_ref text,
        response_key_id  text,
        created_at       timestamptz NOT NULL DEFAULT now(),
        finished_at      timestamptz,
`;
}

/** The claim's result row when the insert won: `ROW`'s columns, NULL but for the token and claim id. */
const CLAIMED_ROW = `SELECT 'claimed' AS outcome, NULL::text AS scope, NULL::text AS key, NULL::bytea AS fingerprint,
        NULL::text AS state, NULL::text AS recovery_point, NULL::jsonb AS phase_results,
        lock_version::text AS lock_version, claim_id::text AS claim_id, NULL::boolean AS lease_expired, NULL::float8 AS lease_remaining_ms, NULL::int AS response_status,
        NULL::jsonb AS response_headers, NULL::bytea AS response_body, NULL::text AS response_body_ref,
        NULL::text AS response_key_id, NULL::timestamptz AS created_at,
        NULL::boolean AS retention_expired`;

/** Statements for one table. */
export interface Statements {
  migrate: string[];
  claim: string;
  readFinished: string;
  readForUpdate: string;
  read: string;
  replaceExpired: string;
  takeOver: string;
  recordPhase: string;
  finish: string;
  extendLease: string;
  release: string;
  discard: string;
  sweepCutoff: string;
  sweepPlan: string;
  sweepBatch: string;
  /** Out-of-line response bodies in `<table>_blobs` (the default {@link BlobStore}). */
  blobPut: string;
  blobGet: string;
  blobDelete: string;
  inspect: string;
  stats: string;
  tableKind: string;
  saveRequest: string;
  listAbandoned: string;
  discardAbandoned: string;
  /** The `<table>_blobs` DDL, also in `migrate` (plain mode only: see {@link partitionedStatements}). */
  blobTable: string;
}

/**
 * The statements that differ in partitioned mode (see {@link partitionedStatements}); every
 * other statement of {@link Statements} is shared, because each of them selects or updates
 * the one row of (scope, key) wherever it lives.
 */
export interface PartitionedStatements {
  migrate: string[];
  lockKey: string;
  claim: string;
  replaceExpired: string;
  today: string;
  listPartitions: string;
  createPartition(name: string, fromDay: string, toDay: string): string;
  lockPartition(name: string): string;
  partitionRows(name: string): string;
  dropPartition(name: string): string;
  setLockTimeout: string;
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
  const blobs = quoteTable(`${table}_blobs`);
  /** `<table>_blobs` (out-of-line bodies); its foreign key needs the plain table's (scope, key). */
  const blobTable = `CREATE TABLE IF NOT EXISTS ${blobs} (
        scope text  NOT NULL,
        key   text  NOT NULL,
        id    text  NOT NULL,
        body  bytea NOT NULL,
        PRIMARY KEY (scope, key),
        FOREIGN KEY (scope, key) REFERENCES ${t} (scope, key) ON DELETE CASCADE
      )`;
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
     * - `response_body_ref`: set when the body is stored out of line (larger than the store's
     *   `inlineMaxBytes`); it names the blob and `response_body` is NULL.
     * - `response_key_id`: set when the response is encrypted at rest: the key id it was sealed
     *   with (also inside the sealed value). `response_headers` then holds one JSON string, the
     *   sealed headers in base64. NULL: plaintext.
     *
     * `<table>_blobs` holds out-of-line bodies, at most one per row. Its foreign key deletes a
     * blob together with its row (sweep, discard) with no change to those statements; the
     * cascade is an index lookup on the blob's primary key per deleted row.
     */
    migrate: [
      `SELECT pg_advisory_xact_lock(hashtext('idem:migrate:' || $1::text))`,
      `CREATE SEQUENCE IF NOT EXISTS ${seq}`,
      `CREATE TABLE IF NOT EXISTS ${t} (${columns(nextToken)}
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
        IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '${t.replaceAll("'", "''")}'::regclass
            AND attname = 'response_body_ref' AND NOT attisdropped) THEN
          ALTER TABLE ${t} ADD COLUMN response_body_ref text, ADD COLUMN response_key_id text;
        END IF;
      END $$`,
      blobTable,
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
     * Read first: the primary-key read (`existing`) runs before the INSERT, and the INSERT is
     * attempted only when no row is visible. A retry then costs a plain index read, without
     * the insert attempt and without drawing a token or a claim_id for nothing (pgbench
     * -M prepared, concurrency 16: about 1.2x the throughput of insert-first on an existing key). Exclusivity still comes from the unique insert alone.
     *
     * Race: when the conflicting row was committed by a concurrent claim after this
     * statement's snapshot was taken, `existing` is empty, the INSERT waits for it and does
     * nothing, and zero rows come back: the caller reads again with `readForUpdate` (a fresh
     * snapshot). A row visible in the snapshot but deleted since (discarded, swept) is
     * reported as it was; the caller's next step (a fenced takeover or replacement) finds it
     * gone and claims again.
     * $1 scope, $2 key, $3 fingerprint, $4 lease ms, $5 retention ms.
     */
    claim: `WITH existing AS (
        SELECT ${ROW}, created_at <= now() - $5::int8 * interval '1 millisecond' AS retention_expired
        FROM ${t} WHERE scope = $1 AND key = $2
      ), claimed AS (
        INSERT INTO ${t} (scope, key, fingerprint, locked_until)
        SELECT $1, $2, $3, now() + $4::int8 * interval '1 millisecond'
        WHERE NOT EXISTS (SELECT 1 FROM existing)
        ON CONFLICT (scope, key) DO NOTHING
        RETURNING lock_version, claim_id
      )
      ${CLAIMED_ROW}
      FROM claimed
      UNION ALL
      SELECT 'exists', existing.* FROM existing`,

    /**
     * Replay fast path, run before the claim: the primary-key read a retry of a finished key
     * needs, and nothing more. A finished row holds no lease (finish sets `locked_until` NULL),
     * so the lease arithmetic of {@link ROW} is left out; that arithmetic and the claim's
     * INSERT machinery made a replay cost about 0.65x a bare primary-key read, this read costs
     * about 1.0x (bench/, concurrency 16). Only a finished row within retention is answered
     * from it; anything else (absent, started, past retention) goes through `claim`, so the
     * claim stays the unique insert. $1 scope, $2 key, $3 retention ms.
     */
    readFinished: `SELECT state, fingerprint, recovery_point, phase_results, lock_version::text AS lock_version, claim_id::text AS claim_id,
        response_status, response_headers, response_body, response_body_ref, response_key_id, created_at,
        created_at <= now() - $3::int8 * interval '1 millisecond' AS retention_expired
      FROM ${t} WHERE scope = $1 AND key = $2`,

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
     * retention longer than any lease can last). The old request snapshot goes too: kept, a
     * completer would run the old request under the new claim and store its response for the
     * new request (found by the model, docs/model, mutant MUT_REPLACE_KEEPS_REQUEST).
     * $1 scope, $2 key, $3 fingerprint, $4 lease ms, $5 retention ms, $6 token read.
     */
    replaceExpired: `UPDATE ${t} SET fingerprint = $3, state = 'started', recovery_point = 'start',
        phase_results = '{}'::jsonb, locked_until = now() + $4::int8 * interval '1 millisecond',
        lock_version = ${nextToken}, claim_id = gen_random_uuid(), response_status = NULL, response_headers = NULL,
        response_body = NULL, response_body_ref = NULL, response_key_id = NULL, created_at = now(), finished_at = NULL,
        request = NULL
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
     * $6 body bytes (NULL when out of line), $7 blob id (NULL when inline), $8 key id (NULL:
     * plaintext).
     */
    finish: `UPDATE ${t} SET state = 'done', recovery_point = 'finished', response_status = $4,
        response_headers = $5::jsonb, response_body = $6, response_body_ref = $7, response_key_id = $8,
        locked_until = NULL, finished_at = now()
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
     * The retention cutoff, fixed once when a sweep starts: rows created at or before it are
     * past retention. A sweep works towards a fixed point, so it ends even while new rows keep
     * expiring, and its total is known in advance (the CLI's progress bar). $1 retention ms.
     */
    sweepCutoff: `SELECT (extract(epoch FROM now() - $1::int8 * interval '1 millisecond') * 1000000)::int8::text AS cutoff_us`,

    /**
     * What a sweep up to the cutoff would find (dry run, progress total): rows created at or
     * before it, and how many of those may go (lease not valid). $1 cutoff µs.
     */
    sweepPlan: `SELECT count(*)::int8::text AS expired,
        count(*) FILTER (WHERE locked_until IS NULL OR locked_until <= now())::int8::text AS sweepable
      FROM ${t} WHERE created_at <= 'epoch'::timestamptz + $1::int8 * interval '1 microsecond'`,

    /**
     * One retention batch (seed step 6), by key range: the next `$5` rows past the cutoff in
     * (created_at, scope, key) order after the cursor, so each batch resumes where the last one
     * ended and no row is scanned twice (no `ctid`: key ranges also work on PostgreSQL-compatible
     * distributed databases). The created_at index gives the order, an incremental sort breaks
     * ties by primary key, the LIMIT stops the scan.
     *
     * Concurrency: FOR UPDATE SKIP LOCKED never waits on a row a live claim or another sweeper
     * holds, and two sweepers never delete the same row (a row one of them locked is skipped by
     * the other; deleted rows are gone). A key whose lease is still valid is left alone (checked
     * again on the locked row): deleting it would let a retry run the work a second time. The
     * cursor moves past the whole batch, skipped rows included, so a run cannot loop on them.
     *
     * Times travel as integer epoch microseconds (exact, unlike a JS Date's milliseconds).
     * $1 cutoff µs, $2 cursor created_at µs, $3 cursor scope, $4 cursor key, $5 batch size.
     * Returns the rows deleted, the rows in the batch and the new cursor (NULL when none).
     */
    sweepBatch: `WITH batch AS (
        SELECT scope, key, created_at FROM ${t}
        WHERE created_at <= 'epoch'::timestamptz + $1::int8 * interval '1 microsecond'
          AND created_at >= 'epoch'::timestamptz + $2::int8 * interval '1 microsecond'
          AND (created_at, scope, key) > ('epoch'::timestamptz + $2::int8 * interval '1 microsecond', $3::text, $4::text)
        ORDER BY created_at, scope, key LIMIT $5
        FOR UPDATE SKIP LOCKED
      ), deleted AS (
        DELETE FROM ${t} AS k USING batch
        WHERE k.scope = batch.scope AND k.key = batch.key AND k.created_at = batch.created_at
          AND (k.locked_until IS NULL OR k.locked_until <= now())
        RETURNING 1
      ), last AS (
        SELECT scope, key, (extract(epoch FROM created_at) * 1000000)::int8::text AS created_us
        FROM batch ORDER BY created_at DESC, scope DESC, key DESC LIMIT 1
      )
      SELECT (SELECT count(*) FROM deleted)::int AS deleted, (SELECT count(*) FROM batch)::int AS scanned,
        last.created_us, last.scope, last.key
      FROM (SELECT 1) AS one LEFT JOIN last ON true`,

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
        created_at, finished_at, created_at <= now() - $3::int8 * interval '1 millisecond' AS retention_expired
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
     * The kind of the table, if it exists: 'r' plain, 'p' partitioned (pg_class.relkind), so a
     * store in one mode refuses a table made in the other. $1 table name as given.
     */
    tableKind: `SELECT relkind::text AS kind FROM pg_class WHERE oid = to_regclass($1)`,

    /**
     * Stores an out-of-line body, on the finish's own transaction and after its fenced UPDATE
     * (which holds the row lock, so the foreign key is satisfied and a lost lease rolls the blob
     * back too). A blob left by an earlier claim of the key is overwritten.
     * $1 scope, $2 key, $3 blob id, $4 body bytes.
     */
    blobPut: `INSERT INTO ${blobs} (scope, key, id, body) VALUES ($1, $2, $3, $4)
      ON CONFLICT (scope, key) DO UPDATE SET id = EXCLUDED.id, body = EXCLUDED.body`,

    /** Reads an out-of-line body for a replay. $1 scope, $2 key, $3 blob id. */
    blobGet: `SELECT body FROM ${blobs} WHERE scope = $1 AND key = $2 AND id = $3`,

    /**
     * Deletes one blob, only if it is still the one named (a newer claim's blob stays).
     * $1 scope, $2 key, $3 blob id.
     */
    blobDelete: `DELETE FROM ${blobs} WHERE scope = $1 AND key = $2 AND id = $3`,

    blobTable,

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

/**
 * Partitioned mode (seed: "partition by created_at, drop whole partitions"): the table is
 * range-partitioned by `created_at`, one partition per UTC day named `<table>_pYYYYMMDD`,
 * created ahead of time; retention drops whole partitions, so expiry leaves no dead tuples.
 *
 * The pitfall: a unique index on a partitioned table must include the partition key, so the
 * primary key is (scope, key, created_at) and PostgreSQL no longer enforces one row per
 * (scope, key): a claim just before midnight and its retry just after would land in two
 * partitions and both "succeed". So the claim here does not rely on an index. It runs in one
 * transaction that first takes a transaction-scoped advisory lock on a hash of (table, scope,
 * key) (`lockKey`), then looks the key up across every partition and inserts only when it is
 * absent (`claim`). Every insert of a key happens under that lock, and the lock is released
 * only after the inserting transaction is committed and visible, so the lookup of the next
 * holder (a new statement, a new snapshot taken after the lock was granted) sees it: at most
 * one row per (scope, key), whatever the partitions. A hash collision only makes two unrelated
 * keys wait for each other for one claim.
 *
 * Every other statement (takeover, phases, finish, heartbeat, release, discard, read) selects
 * the key by (scope, key) without `created_at`, so it finds the one row in whichever partition
 * it lives and is shared with the plain table unchanged.
 */
export function partitionedStatements(table: string): PartitionedStatements {
  const plain = statements(table);
  const t = quoteTable(table);
  const [lock, seqDdl, , ...rest] = plain.migrate;
  const seq = quoteTable(`${table}_lock_version_seq`);
  const nextToken = `nextval('${seq.replaceAll("'", "''")}'::regclass)`;
  const literal = (text: string) => `'${text.replaceAll("'", "''")}'`;
  const schema = table.includes('.') ? `"${table.split('.')[0]}".` : '';
  const partition = (name: string) => `${schema}"${name}"`;
  return {
    /**
     * The plain migration with the partitioned table in place of the plain one: the same
     * columns, primary key (scope, key, created_at) as PostgreSQL requires, and the same
     * upgrade steps after it. Partitions are created by `maintain` (the store does it in
     * `migrate`). No `<table>_blobs`: its foreign key cannot reference a partitioned table's
     * (scope, key), so partitioned mode keeps bodies inline or in an external blob store.
     */
    migrate: [
      lock!,
      seqDdl!,
      `CREATE TABLE IF NOT EXISTS ${t} (${columns(nextToken)}
        PRIMARY KEY (scope, key, created_at)
      ) PARTITION BY RANGE (created_at)`,
      ...rest.filter((statement) => statement !== plain.blobTable),
    ],

    /**
     * The per-key claim lock, held until the claim's transaction ends. Run it as a statement
     * of its own before `claim`: a statement's snapshot is taken when it starts, so a lookup in
     * the same statement could miss a row committed while it waited for the lock.
     * $1 scope, $2 key.
     */
    lockKey: `SELECT pg_advisory_xact_lock(hashtextextended(${literal(table)} || '/' || $1::text || '/' || $2::text, 0))`,

    /**
     * Claim in partitioned mode, under `lockKey`: the existing row from any partition, or a new
     * row when there is none, with the plain claim's result shape. $1 scope, $2 key,
     * $3 fingerprint, $4 lease ms, $5 retention ms.
     */
    claim: `WITH existing AS (
        SELECT ${ROW}, created_at <= now() - $5::int8 * interval '1 millisecond' AS retention_expired
        FROM ${t} WHERE scope = $1 AND key = $2
      ), claimed AS (
        INSERT INTO ${t} (scope, key, fingerprint, locked_until)
        SELECT $1, $2, $3, now() + $4::int8 * interval '1 millisecond'
        WHERE NOT EXISTS (SELECT 1 FROM existing)
        RETURNING lock_version, claim_id
      )
      ${CLAIMED_ROW} FROM claimed
      UNION ALL
      SELECT 'exists', existing.* FROM existing`,

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

    /** Today's UTC date by the database clock, as YYYY-MM-DD. */
    today: `SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day`,

    /**
     * The table's daily partitions (named by `createPartition`), oldest first, with whether a
     * partition's whole day lies at or before the retention cutoff. $1 table name as given,
     * $2 retention ms.
     */
    listPartitions: `SELECT c.relname AS name,
        to_char(to_date(right(c.relname, 8), 'YYYYMMDD'), 'YYYY-MM-DD') AS day,
        (to_date(right(c.relname, 8), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
          <= now() - $2::int8 * interval '1 millisecond' AS expired
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = to_regclass($1) AND c.relname ~ '_p[0-9]{8}$'
      ORDER BY right(c.relname, 8)`,

    /** One UTC day's partition, [fromDay 00:00 UTC, toDay 00:00 UTC). Idempotent. */
    createPartition: (name, fromDay, toDay) =>
      `CREATE TABLE IF NOT EXISTS ${partition(name)} PARTITION OF ${t}
        FOR VALUES FROM (${literal(`${fromDay} 00:00:00+00`)}) TO (${literal(`${toDay} 00:00:00+00`)})`,

    /**
     * Before a drop: lock the partition against writes (SHARE: claims still read it), so no
     * takeover can start a lease in it between the check below and the drop.
     */
    lockPartition: (name) => `LOCK TABLE ${partition(name)} IN SHARE MODE`,

    /**
     * Rows in the partition and how many hold a valid lease (a worker alive past retention:
     * then the partition is kept).
     */
    partitionRows: (name) =>
      `SELECT count(*)::int8::text AS n, count(*) FILTER (WHERE locked_until > now())::int8::text AS live FROM ${partition(name)}`,

    /**
     * Retention for a whole day in one statement: no row-by-row delete, no dead tuples. It
     * takes a brief ACCESS EXCLUSIVE lock on the parent table, bounded by `setLockTimeout`.
     */
    dropPartition: (name) => `DROP TABLE ${partition(name)}`,

    /**
     * Bounds how long the drop may wait for (and so make claims queue behind) its locks, for the
     * rest of the transaction; on timeout the partition is kept for the next run. $1 e.g. '1000ms'.
     */
    setLockTimeout: `SELECT set_config('lock_timeout', $1::text, true)`,
  };
}
