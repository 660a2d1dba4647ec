import { blobTableStatement } from './blobs.js';
import { columns, literal, type TableNames } from './table.js';

/**
 * Migration, run in one transaction under an advisory lock (the first statement, which takes
 * $1 the table name) so two hosts starting at once do not race on CREATE. Safe to run any
 * number of times.
 *
 * Columns follow protocol.md Q1-Q6, with these choices:
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
 *
 * Partitioned mode: the same steps with the partitioned table in place of the plain one (the
 * same columns, primary key (scope, key, created_at) as PostgreSQL requires). Partitions are
 * created by `maintain` (the store does it in `migrate`). No `<table>_blobs`: its foreign key
 * cannot reference a partitioned table's (scope, key), so partitioned mode keeps bodies
 * inline or in an external blob store.
 */
export function migrateStatements(n: TableNames, mode: 'plain' | 'partitioned'): string[] {
  const { t, seq, bare, nextToken } = n;
  const regclass = literal(t);
  const createTable =
    mode === 'plain'
      ? `CREATE TABLE IF NOT EXISTS ${t} (${columns(nextToken)}
        PRIMARY KEY (scope, key)
      )`
      : `CREATE TABLE IF NOT EXISTS ${t} (${columns(nextToken)}
        PRIMARY KEY (scope, key, created_at)
      ) PARTITION BY RANGE (created_at)`;
  // A column added to a table made by an earlier version, only when missing (so an up-to-date
  // table takes no lock); each has a constant default or none, so adding it rewrites nothing.
  const addColumn = (name: string, definition: string) => `DO $$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = ${regclass}::regclass
            AND attname = '${name}' AND NOT attisdropped) THEN
          ALTER TABLE ${t} ADD COLUMN ${definition};
        END IF;
      END $$`;
  return [
    `SELECT pg_advisory_xact_lock(hashtext('idem:migrate:' || $1::text))`,
    `CREATE SEQUENCE IF NOT EXISTS ${seq}`,
    createTable,
    `CREATE INDEX IF NOT EXISTS "${bare}_created_at_idx" ON ${t} (created_at)`,
    // Dropping the table drops its token sequence too. Set only when missing: an up-to-date
    // table takes no lock for it, and Citus refuses any ALTER SEQUENCE on a distributed
    // table's sequence ("Altering a distributed sequence is currently not supported").
    `DO $$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_depend d JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
            WHERE d.classid = 'pg_class'::regclass AND d.objid = ${literal(seq)}::regclass AND d.deptype = 'a'
              AND d.refobjid = ${regclass}::regclass AND a.attname = 'lock_version') THEN
          ALTER SEQUENCE ${seq} OWNED BY ${t}.lock_version;
        END IF;
      END $$`,
    // Upgrade a table created by an earlier version: add claim_id; and where tokens came
    // from DEFAULT 0, move the sequence above every token in use, then switch the default.
    // Each step runs only when needed (no lock taken on an up-to-date table).
    `DO $$ BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = ${regclass}::regclass
            AND attname = 'claim_id' AND NOT attisdropped) THEN
          ALTER TABLE ${t} ADD COLUMN claim_id uuid NOT NULL DEFAULT gen_random_uuid();
        END IF;
        IF (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d
            JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
            WHERE d.adrelid = ${regclass}::regclass AND a.attname = 'lock_version') NOT LIKE 'nextval(%' THEN
          PERFORM setval(${literal(seq)}::regclass, GREATEST((SELECT max(lock_version) FROM ${t}), 0) + 1);
          ALTER TABLE ${t} ALTER COLUMN lock_version SET DEFAULT ${nextToken};
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = ${regclass}::regclass
            AND attname = 'response_body_ref' AND NOT attisdropped) THEN
          ALTER TABLE ${t} ADD COLUMN response_body_ref text, ADD COLUMN response_key_id text;
        END IF;
      END $$`,
    ...(mode === 'plain' ? [blobTableStatement(n)] : []),
    // Completer (issue 4): the request snapshot, NULL unless the app opted in. Added only
    // when missing, so an up-to-date table takes no lock.
    addColumn('request', 'request jsonb'),
    // Failed attempts per key (issue 11): a constant default, so adding it to a table made by
    // an earlier version rewrites nothing; added only when missing.
    addColumn('failed_attempts', 'failed_attempts int NOT NULL DEFAULT 0'),
    // Released keys (protocol.md K23): a takeover of a lease that ran out unreleased counts as
    // a failed attempt. A constant default, added only when missing, as above.
    addColumn('released', 'released boolean NOT NULL DEFAULT false'),
    // The last operator action on a key (protocol.md K40): nullable, added only when missing.
    addColumn('operator_note', 'operator_note text'),
    // Completer: finds started keys by lease end without scanning finished rows. Partial,
    // so it holds only keys in flight (a few per worker), not the retained history.
    `CREATE INDEX IF NOT EXISTS "${bare}_started_idx" ON ${t} (locked_until) WHERE state = 'started'`,
  ];
}

/**
 * The kind of the table, if it exists: 'r' plain, 'p' partitioned (pg_class.relkind), so a
 * store in one mode refuses a table made in the other. $1 table name as given.
 */
export const tableKind = `SELECT relkind::text AS kind FROM pg_class WHERE oid = to_regclass($1)`;
