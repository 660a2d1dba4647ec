/**
 * Every statement of the MySQL store (protocol.md Q1-Q6 on MySQL and MariaDB), by name, for
 * one key table. Written for both servers: MariaDB 10.11 runs them in CI; MySQL 8 is checked
 * on paper (docs/guides/mysql.md lists what differs and which form was picked).
 *
 * Common forms chosen where the two servers differ:
 * - No `RETURNING` (MySQL has none; MariaDB has it for INSERT and DELETE only): a write's
 *   outcome is its rows matched (`rowsMatched` in client.ts), and the few values a write
 *   produces (a token, a claim id) are made before it (the token drawn, the claim id a UUID
 *   from the process) or read back by the new token (takeover).
 * - No sequence (MariaDB has `CREATE SEQUENCE`, MySQL has not): fencing tokens are the
 *   AUTO_INCREMENT of `<table>_tokens` (see {@link MySqlStatements.drawToken}).
 * - No JSON column type (MySQL's is binary, MariaDB's an alias of LONGTEXT): JSON lives in
 *   LONGTEXT and is written with `JSON_SET`, which both servers have.
 * - Time: `DATETIME(6)` columns in UTC against `UTC_TIMESTAMP(6)`, the server's clock with
 *   microseconds and independent of the session's `time_zone` (a `TIMESTAMP` compared with
 *   `NOW()` is converted through the session's zone, ambiguous in a DST fold). Like `NOW()`,
 *   it is fixed for the whole statement. Intervals travel as integer microseconds
 *   (`INTERVAL ? MICROSECOND`); times come back as epoch milliseconds, never as a DATETIME
 *   (mysql2 would read that in the pool's `timezone`).
 * - No `SKIP LOCKED` in a DELETE (neither server): the sweep deletes by `ORDER BY created_at
 *   LIMIT n` at READ COMMITTED, which locks only the rows it deletes.
 *
 * Placeholders are `?`, bound in order; each statement lists its values.
 */

import { earlier, epochMs, LEASE_OVER, later, NOW } from './sql-clock.js';
import { operatorStatements } from './sql-operator.js';

/** Quotes a table name after checking it is a plain (optionally database-qualified) identifier. */
export function quoteTable(name: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,56}(\.[A-Za-z_][A-Za-z0-9_]{0,63})?$/.test(name) || name.split('.').pop()!.length > 57) {
    throw new Error(
      `Invalid table name ${JSON.stringify(name)}: letters, digits and _ (optionally database.table), at most 57 characters so that "<table>_tokens" fits MySQL's 64`,
    );
  }
  return name
    .split('.')
    .map((part) => `\`${part}\``)
    .join('.');
}

/** Every write after the claim: the row, held by this token, still started (protocol.md K8). */
const FENCE = "scope = ? AND `key` = ? AND lock_version = ? AND state = 'started'";

/**
 * The columns of a key as a record reads them, lease and retention judged by the server's clock.
 * Values: retention µs, retention µs (then the statement's own).
 */
const ROW = `state, fingerprint, recovery_point, phase_results, lock_version, claim_id,
  ${LEASE_OVER} AS lease_expired,
  GREATEST(0, TIMESTAMPDIFF(MICROSECOND, ${NOW}, locked_until)) DIV 1000 AS lease_remaining_ms,
  response_status, response_headers, response_body, response_body_ref, response_key_id, operator_note,
  ${epochMs('created_at')} AS created_ms,
  created_at <= ${earlier} AS retention_expired,
  (TIMESTAMPDIFF(MICROSECOND, ${NOW}, created_at) + ?) DIV 1000 AS retention_remaining_ms`;

/** The statements of one key table; see {@link mysqlStatements}. */
export type MySqlStatements = ReturnType<typeof mysqlStatements>;

/**
 * The statements on `table` (`<table>`, `<table>_blobs`, `<table>_tokens`).
 * @throws {Error} for a table name that is not a plain identifier
 */
export function mysqlStatements(table: string) {
  const t = quoteTable(table);
  const blobs = quoteTable(`${table}_blobs`);
  const tokens = quoteTable(`${table}_tokens`);
  const bare = table.split('.').pop()!;
  return {
    table,
    // ---- migration ------------------------------------------------------------------------

    /**
     * The key table (protocol.md Q1-Q6's columns):
     * - `scope` and `key` are VARBINARY: compared byte for byte. A `_bin` collation of VARCHAR
     *   still ignores trailing spaces (PAD SPACE), so `k` and `k ` would be one key; the
     *   NO PAD collations have different names on MySQL and MariaDB. 1020 bytes hold 255
     *   characters of UTF-8, and the primary key stays under InnoDB's 3072-byte limit.
     * - `phase_results`, `response_headers`, `request`: JSON as LONGTEXT, written explicitly on
     *   insert (MySQL before 8.0.13 allows no DEFAULT on a TEXT column). A phase's result is
     *   kept as its JSON text, a string value in `phase_results` (see `recordPhase`).
     * - `locked_until`, `created_at`, `finished_at`: DATETIME(6) in UTC (see the file's header).
     * - `lock_version`: the fencing token, drawn from `<table>_tokens` (see `drawToken`).
     * The created_at index serves the sweep; (state, locked_until) the completer's listing.
     */
    createTable: `CREATE TABLE IF NOT EXISTS ${t} (
        scope             VARBINARY(1020) NOT NULL,
        \`key\`             VARBINARY(1020) NOT NULL,
        fingerprint       BINARY(32)      NOT NULL,
        state             VARCHAR(8)      NOT NULL,
        recovery_point    VARCHAR(64)     NOT NULL,
        phase_results     LONGTEXT        NOT NULL,
        locked_until      DATETIME(6)     NULL,
        lock_version      BIGINT UNSIGNED NOT NULL,
        claim_id          CHAR(36)        NOT NULL,
        response_status   INT             NULL,
        response_headers  LONGTEXT        NULL,
        response_body     LONGBLOB        NULL,
        response_body_ref VARCHAR(64)     NULL,
        response_key_id   VARCHAR(255)    NULL,
        request           LONGTEXT        NULL,
        created_at        DATETIME(6)     NOT NULL,
        finished_at       DATETIME(6)     NULL,
        failed_attempts   INT             NOT NULL DEFAULT 0,
        released          TINYINT         NOT NULL DEFAULT 0,
        operator_note     LONGTEXT        NULL,
        PRIMARY KEY (scope, \`key\`),
        KEY \`${bare}_created_idx\` (created_at),
        KEY \`${bare}_started_idx\` (state, locked_until)
      ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,

    /**
     * Out-of-line bodies (protocol.md K14), at most one per key; the foreign key deletes a blob
     * with its row (sweep, discard).
     */
    createBlobs: `CREATE TABLE IF NOT EXISTS ${blobs} (
        scope  VARBINARY(1020) NOT NULL,
        \`key\`  VARBINARY(1020) NOT NULL,
        id     VARCHAR(64)     NOT NULL,
        body   LONGBLOB        NOT NULL,
        PRIMARY KEY (scope, \`key\`),
        FOREIGN KEY (scope, \`key\`) REFERENCES ${t} (scope, \`key\`) ON DELETE CASCADE
      ) ENGINE=InnoDB`,

    /**
     * The token source (protocol.md K8): one AUTO_INCREMENT per table, never per row, so tokens
     * only grow, also across a delete and a new claim of the key. Its highest row is always
     * kept (`trimTokens`), so even a server that recomputes the counter from the table on
     * restart (MySQL before 8.0) never hands out a token twice.
     */
    createTokens: `CREATE TABLE IF NOT EXISTS ${tokens} (
        id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY
      ) ENGINE=InnoDB`,

    /** Whether the key table exists yet. Values: table name (unqualified), database or NULL for the current one. */
    tableExists: `SELECT COUNT(*) AS n FROM information_schema.tables
      WHERE table_name = ? AND table_schema = COALESCE(?, DATABASE())`,

    /** Two hosts migrating at once wait for each other (a named lock, up to 30 s). Value: lock name. */
    lockMigration: 'SELECT GET_LOCK(?, 30) AS locked',
    unlockMigration: 'SELECT RELEASE_LOCK(?) AS released',

    /** Whether the server is MariaDB (for messages and the guide; the statements are the same). */
    version: 'SELECT VERSION() AS version',

    // ---- claim (protocol.md K3, Q1, Q2) -----------------------------------------------------

    /**
     * Draws a fencing token: a new row of `<table>_tokens`, whose id mysql2 returns as
     * `insertId`. An AUTO_INCREMENT is handed out under a short mutex, not a row lock held to
     * commit, so concurrent claims do not queue behind each other (unlike a one-row counter).
     * Values: none.
     */
    drawToken: `INSERT INTO ${tokens} () VALUES ()`,

    /**
     * The key as it is (replay fast path and the claim's first look): one primary-key read,
     * autocommit, so it sees the latest committed row.
     * Values: retention µs, retention µs, scope, key.
     */
    read: `SELECT ${ROW} FROM ${t} WHERE scope = ? AND \`key\` = ?`,

    /**
     * After an insert found the key taken: the row as committed now. A locking read (FOR
     * UPDATE) reads the newest committed version whatever the session's isolation and waits for
     * a transaction writing the row; the lock ends with the statement (autocommit), since the
     * takeover is a compare-and-set, not a held lock (protocol.md Q2).
     * Values: retention µs, retention µs, scope, key.
     */
    readLocked: `SELECT ${ROW} FROM ${t} WHERE scope = ? AND \`key\` = ? FOR UPDATE`,

    /**
     * The claim (protocol.md Q1): a primary-key insert, autocommit, so concurrent duplicates see
     * it at once. Exclusivity comes from the primary key alone: a duplicate inserts nothing (its
     * check waits for an uncommitted insert of the key, then reads it as committed) and reports
     * 0 rows. The key was absent in `read` just before, so the common outcome is 1 row. IGNORE
     * turns only the duplicate into "nothing inserted": every value is checked before (scope and
     * key ≤ 1020 bytes, fingerprint 32 bytes).
     * Values: scope, key, fingerprint, lease µs, token, claim id.
     */
    claim: `INSERT IGNORE INTO ${t} (scope, \`key\`, fingerprint, state, recovery_point, phase_results, locked_until,
        lock_version, claim_id, created_at, failed_attempts, released)
      VALUES (?, ?, ?, 'started', 'start', '{}', ${later}, ?, ?, ${NOW}, 0, 0)`,

    /**
     * A row past retention counts as absent (protocol.md K6): replaced by a fresh claim, fenced
     * on the token read and only while its lease is not valid. The request snapshot goes too
     * (protocol.md K12, mutant MUT_REPLACE_KEEPS_REQUEST).
     * Values: fingerprint, lease µs, new token, new claim id, scope, key, token read, retention µs.
     */
    replaceExpired: `UPDATE ${t} SET fingerprint = ?, state = 'started', recovery_point = 'start', phase_results = '{}',
        locked_until = ${later}, lock_version = ?, claim_id = ?, response_status = NULL, response_headers = NULL,
        response_body = NULL, response_body_ref = NULL, response_key_id = NULL, request = NULL,
        created_at = ${NOW}, finished_at = NULL, failed_attempts = 0, released = 0, operator_note = NULL
      WHERE scope = ? AND \`key\` = ? AND lock_version = ? AND created_at <= ${earlier} AND ${LEASE_OVER}`,

    // ---- writes after the claim, fenced by the token (protocol.md K8, Q3-Q5) -------------------

    /**
     * Takeover of an expired or released lease (protocol.md Q3), a compare-and-set on the token
     * read. A lease that ran out unreleased counts a failed attempt (protocol.md K23): MySQL
     * evaluates a single-table UPDATE's assignments left to right, so `failed_attempts` reads
     * `released` before it is cleared.
     * Values: lease µs, new token, scope, key, token read.
     */
    takeOver: `UPDATE ${t} SET locked_until = ${later}, lock_version = ?,
        failed_attempts = failed_attempts + IF(released = 1, 0, 1), released = 0
      WHERE scope = ? AND \`key\` = ? AND lock_version = ? AND state = 'started' AND ${LEASE_OVER}`,

    /**
     * What a takeover resumes from, read by the token it just wrote (no RETURNING on UPDATE):
     * no row means another worker took the key over in between, as a lost compare-and-set.
     * Values: scope, key, new token.
     */
    takenOver: `SELECT claim_id, recovery_point, phase_results, failed_attempts FROM ${t}
      WHERE scope = ? AND \`key\` = ? AND lock_version = ?`,

    /**
     * An atomic phase's recovery point and result (protocol.md Q4), last in the phase's
     * transaction; renews the lease. The result is stored as its JSON text, a string value under
     * the phase's name (`JSON_SET` with a string binds a JSON string on both servers; a name is
     * `[A-Za-z0-9_.-]`, safe inside the quoted path).
     * Values: phase, phase, result JSON text, lease µs, scope, key, token.
     */
    recordPhase: `UPDATE ${t} SET recovery_point = ?, phase_results = JSON_SET(phase_results, CONCAT('$."', ?, '"'), ?),
        locked_until = ${later}
      WHERE ${FENCE}`,

    /**
     * Finish (protocol.md Q5): done, the response stored, the lease cleared.
     * Values: status, headers JSON, body (NULL out of line), blob id (NULL inline), key id (NULL plaintext), scope, key, token.
     */
    finish: `UPDATE ${t} SET state = 'done', recovery_point = 'finished', response_status = ?, response_headers = ?,
        response_body = ?, response_body_ref = ?, response_key_id = ?, locked_until = NULL, finished_at = ${NOW}
      WHERE ${FENCE}`,

    /** Heartbeat (protocol.md K7). Values: lease µs, scope, key, token. */
    extendLease: `UPDATE ${t} SET locked_until = ${later} WHERE ${FENCE}`,

    /**
     * Release after a throw (protocol.md K10): the lease ends now, the recovery point stays, and
     * the next takeover does not count this attempt as a crash (K23). Values: scope, key, token.
     */
    release: `UPDATE ${t} SET locked_until = ${NOW}, released = 1 WHERE ${FENCE}`,

    /** A failed attempt counted on a held key (protocol.md K23). Values: scope, key, token. */
    countFailure: `UPDATE ${t} SET failed_attempts = failed_attempts + 1 WHERE ${FENCE}`,
    /** The count just written, by the token. Values: scope, key, token. */
    failedAttempts: `SELECT failed_attempts FROM ${t} WHERE ${FENCE}`,

    /** Discard before any phase (protocol.md K10). Values: scope, key, token. */
    discard: `DELETE FROM ${t} WHERE ${FENCE} AND recovery_point = 'start'`,

    // ---- completer (protocol.md K12, K13) ------------------------------------------------------

    /** The request snapshot, before the work starts. Values: snapshot JSON, scope, key, token. */
    saveRequest: `UPDATE ${t} SET request = ? WHERE ${FENCE}`,

    /**
     * Started keys within retention whose lease ended at least the grace ago, oldest lease first
     * (NULL sorts first in ascending order on both servers). A read only: each is taken over by
     * compare-and-set. Values: retention µs, retention µs, grace µs, retention µs, limit.
     */
    listAbandoned: `SELECT scope, \`key\`, ${ROW}, request FROM ${t}
      WHERE state = 'started' AND (locked_until IS NULL OR locked_until <= ${earlier}) AND created_at > ${earlier}
      ORDER BY locked_until LIMIT ?`,

    /** Deletes a listed key on which nothing ran, if still as listed. Values: scope, key, token. */
    discardAbandoned: `DELETE FROM ${t} WHERE ${FENCE} AND recovery_point = 'start' AND request IS NULL AND ${LEASE_OVER}`,

    // ---- out-of-line bodies (protocol.md K14) --------------------------------------------------

    /**
     * A blob in the finish's transaction, after its fenced UPDATE matched (that row lock holds
     * the parent, so the foreign key is satisfied and a rollback takes the blob too). A blob of
     * an earlier claim of the key is deleted first (`blobClear`), a portable upsert.
     * Values: scope, key, blob id, body.
     */
    blobPut: `INSERT INTO ${blobs} (scope, \`key\`, id, body) VALUES (?, ?, ?, ?)`,
    /** Values: scope, key. */
    blobClear: `DELETE FROM ${blobs} WHERE scope = ? AND \`key\` = ?`,
    /** Values: scope, key, blob id. */
    blobGet: `SELECT body FROM ${blobs} WHERE scope = ? AND \`key\` = ? AND id = ?`,
    /** Deletes one blob, only if still the one named. Values: scope, key, blob id. */
    blobDelete: `DELETE FROM ${blobs} WHERE scope = ? AND \`key\` = ? AND id = ?`,

    // ---- retention (protocol.md K6, Q6) ------------------------------------------------------

    /**
     * The cutoff, fixed when a sweep starts, as text the batches compare with and as epoch ms.
     * Values: retention µs, retention µs.
     */
    sweepCutoff: `SELECT DATE_FORMAT(${earlier}, '%Y-%m-%d %H:%i:%s.%f') AS cutoff,
        ${epochMs(earlier)} AS cutoff_ms`,

    /** Dry run: rows at or before the cutoff, and those a sweep may delete. Values: cutoff. */
    sweepPlan: `SELECT COUNT(*) AS expired, COALESCE(SUM(${LEASE_OVER}), 0) AS sweepable FROM ${t} WHERE created_at <= ?`,

    /**
     * One retention batch: the oldest rows at or before the cutoff whose lease is not valid
     * (a live worker's key stays, protocol.md K6). Run at READ COMMITTED (`readCommitted`), which
     * locks only the rows deleted, not the gaps, so claims of new keys never wait for it.
     * Blobs go by the foreign key. Values: cutoff, batch size.
     */
    sweepBatch: `DELETE FROM ${t} WHERE created_at <= ? AND ${LEASE_OVER} ORDER BY created_at LIMIT ?`,

    /** The isolation of the next transaction on the connection (the sweep's DELETE). */
    readCommitted: 'SET TRANSACTION ISOLATION LEVEL READ COMMITTED',

    /** The highest token row, which stays. */
    topToken: `SELECT MAX(id) AS top FROM ${tokens}`,
    /** Token rows below the highest, in batches. Values: top id, batch size. */
    trimTokens: `DELETE FROM ${tokens} WHERE id < ? ORDER BY id LIMIT ?`,

    // ---- operator reads (idem inspect, idem stats) -------------------------------------------

    /** One key in full, past retention or not. Values: retention µs, scope, key. */
    inspect: `SELECT scope, \`key\`, HEX(fingerprint) AS fingerprint, state, recovery_point, phase_results, lock_version, claim_id,
        ${epochMs('locked_until')} AS locked_until_ms, ${LEASE_OVER} AS lease_expired,
        GREATEST(0, TIMESTAMPDIFF(MICROSECOND, ${NOW}, locked_until)) DIV 1000 AS lease_remaining_ms,
        response_status, response_headers, OCTET_LENGTH(response_body) AS response_bytes, response_body_ref, response_key_id,
        ${epochMs('created_at')} AS created_ms, ${epochMs('finished_at')} AS finished_ms,
        created_at <= ${earlier} AS retention_expired, operator_note
      FROM ${t} WHERE scope = ? AND \`key\` = ?`,

    /** Table health in one scan. Values: retention µs, retention µs. */
    stats: `SELECT COUNT(*) AS total, COALESCE(SUM(state = 'started'), 0) AS started, COALESCE(SUM(state = 'done'), 0) AS done,
        ${epochMs('MIN(created_at)')} AS oldest_ms,
        COALESCE(SUM(created_at <= ${earlier} AND ${LEASE_OVER}), 0) AS expired_unswept,
        COALESCE(SUM(state = 'started' AND ${LEASE_OVER} AND created_at > ${earlier}), 0) AS abandoned,
        COALESCE(SUM(locked_until > ${NOW}), 0) AS live_leases
      FROM ${t}`,

    ...operatorStatements(t),

    /** Drops, for tests and tools that made the table. */
    drop: [`DROP TABLE IF EXISTS ${blobs}`, `DROP TABLE IF EXISTS ${t}`, `DROP TABLE IF EXISTS ${tokens}`],
  };
}
