/**
 * The names every statement of one key table is built from: the quoted table, its token
 * sequence and blob table, and the shared column lists.
 */

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

/** A SQL string literal of `text`. */
export function literal(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

/** The derived, quoted names of one key table; see {@link tableNames}. */
export interface TableNames {
  /** The table name as given (unquoted, optionally schema-qualified). */
  table: string;
  /** The table, quoted. */
  t: string;
  /** The table name with its schema dot replaced by `_`, for index names. */
  bare: string;
  /** The token sequence `<table>_lock_version_seq`, quoted. */
  seq: string;
  /** The out-of-line body table `<table>_blobs`, quoted. */
  blobs: string;
  /** The expression that draws the next fencing token. */
  nextToken: string;
}

/**
 * The names of `table`'s objects.
 * @throws {Error} for a name that is not a plain identifier, or too long for its sequence's name
 */
export function tableNames(table: string): TableNames {
  const t = quoteTable(table);
  // Fencing tokens come from one sequence per table, never from a per-row counter: a row
  // deleted (discarded, swept) and claimed again must not hand out a token that a stale
  // worker of the old row still holds.
  if (table.split('.').pop()!.length > 46) {
    throw new Error(
      `Table name ${JSON.stringify(table)} is too long: at most 46 characters, so that its token sequence "<table>_lock_version_seq" fits PostgreSQL's 63`,
    );
  }
  const seq = quoteTable(`${table}_lock_version_seq`);
  return {
    table,
    t,
    bare: table.replace('.', '_'),
    seq,
    blobs: quoteTable(`${table}_blobs`),
    nextToken: `nextval(${literal(seq)}::regclass)`,
  };
}

/**
 * The columns read back whenever a row is inspected, with lease and retention judged by the
 * database clock. {@link CLAIMED_ROW} lists the same columns in the same order. `created_at`
 * goes out as JSON's ISO 8601 text with its offset, which no session setting changes (a
 * `timestamptz` as text follows the session's DateStyle, and some drivers read it in the
 * client's zone).
 */
export const ROW = `scope, key, fingerprint, state, recovery_point, phase_results, lock_version::text AS lock_version, claim_id::text AS claim_id,
  (locked_until IS NULL OR locked_until <= now()) AS lease_expired,
  GREATEST(0, EXTRACT(EPOCH FROM (locked_until - now())) * 1000)::float8 AS lease_remaining_ms,
  response_status, response_headers, response_body, response_body_ref, response_key_id, to_json(created_at) #>> '{}' AS created_at`;

/** The claim's result row when the insert won: {@link ROW}'s columns, NULL but for the token and claim id. */
export const CLAIMED_ROW = `SELECT 'claimed' AS kind, NULL::text AS scope, NULL::text AS key, NULL::bytea AS fingerprint,
        NULL::text AS state, NULL::text AS recovery_point, NULL::jsonb AS phase_results,
        lock_version::text AS lock_version, claim_id::text AS claim_id, NULL::boolean AS lease_expired, NULL::float8 AS lease_remaining_ms, NULL::int AS response_status,
        NULL::jsonb AS response_headers, NULL::bytea AS response_body, NULL::text AS response_body_ref,
        NULL::text AS response_key_id, NULL::text AS created_at,
        NULL::boolean AS retention_expired, NULL::float8 AS retention_remaining_ms`;

/**
 * The column definitions of the key table, shared by the plain table and the partitioned one
 * (each adds its own primary key). See `migrateStatements` for the choices.
 */
export function columns(nextToken: string): string {
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
        failed_attempts  int         NOT NULL DEFAULT 0,
        released         boolean     NOT NULL DEFAULT false,
        operator_note    text,
`;
}
