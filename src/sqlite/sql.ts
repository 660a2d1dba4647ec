/**
 * Every statement of the SQLite store (protocol.md Q1-Q6 on SQLite, K51), by name, for one key
 * table. Placeholders are `?`, bound in order; each statement lists its values.
 *
 * Forms chosen:
 * - **Clock**: times are INTEGER epoch milliseconds, compared with {@link NOW}, the database's
 *   clock (SQLite's `'now'`, the clock of the host the file is on, shared by every process on
 *   it: one clock, as protocol.md asks). It is read as `julianday('now')` (SQLite keeps `'now'` as
 *   integer milliseconds of the Julian day, so the conversion is exact) rather than
 *   `unixepoch('subsec')`, which needs SQLite 3.42: a system SQLite (`bun:sqlite` on macOS)
 *   may be older. `'now'` is fixed within one statement.
 * - **Tokens** (protocol.md K8): one counter row per table in `<table>_tokens`, drawn inside
 *   the write transaction of a claim, takeover, replacement or operator write. SQLite has one
 *   writer at a time, so a one-row counter costs no concurrency; it never goes back, also
 *   across a delete and a new claim of the key.
 * - **Outcomes** by `RETURNING` (SQLite 3.35+): a fenced write returns the row it matched, so
 *   every driver reports it the same way (no `changes` count).
 * - **Bodies inline**: SQLite keeps a large value on overflow pages of its own and a read is a
 *   local page read, not a network round trip, so there is no blob table (protocol.md K14).
 * - `scope` and `key` are TEXT compared with SQLite's default BINARY collation: byte for byte.
 */

/** The database's clock in epoch ms (see the header). */
export const NOW = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";
/** The lease is not valid: none, or ended by the database's clock. */
export const LEASE_OVER = `(locked_until IS NULL OR locked_until <= ${NOW})`;

/** Quotes a table name after checking it is a plain identifier. */
export function quoteTable(name: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(name)) {
    throw new Error(`Invalid table name ${JSON.stringify(name)}: letters, digits and _, at most 63 characters`);
  }
  return `"${name}"`;
}

/** Every write after the claim: the row, held by this token, still started (protocol.md K8). */
const FENCE = "scope = ? AND key = ? AND lock_version = ? AND state = 'started'";

/**
 * The columns of a key as a record reads them, lease and retention judged by the database's
 * clock. Values: retention ms, retention ms.
 */
const ROW = `state, fingerprint, recovery_point, phase_results, lock_version, claim_id,
  ${LEASE_OVER} AS lease_expired,
  MAX(0, COALESCE(locked_until, 0) - ${NOW}) AS lease_remaining_ms,
  response_status, response_headers, response_body, response_key_id, operator_note, created_at,
  created_at <= ${NOW} - ? AS retention_expired,
  created_at + ? - ${NOW} AS retention_remaining_ms`;

/** The statements of one key table; see {@link sqliteStatements}. */
export type SqliteStatements = ReturnType<typeof sqliteStatements>;

/**
 * The statements on `table` (`<table>`, `<table>_tokens`).
 * @throws {Error} for a table name that is not a plain identifier
 */
export function sqliteStatements(table: string) {
  const t = quoteTable(table);
  const tokens = quoteTable(`${table}_tokens`);
  return {
    table,
    // ---- migration ------------------------------------------------------------------------

    /**
     * WAL: readers never wait for the writer and the writer never waits for readers; one writer
     * at a time. Kept in the file, so every connection to it gets it. Returns the mode now in force.
     */
    wal: 'PRAGMA journal_mode = WAL',

    /**
     * The key table (protocol.md Q1-Q6's columns). Times are epoch ms (see the header);
     * `phase_results` is JSON text, each phase's result kept as its own JSON text (see
     * `recordPhase`). The created_at index serves the sweep; (state, locked_until) the
     * completer's listing.
     */
    create: [
      `CREATE TABLE IF NOT EXISTS ${t} (
        scope            TEXT    NOT NULL,
        key              TEXT    NOT NULL,
        fingerprint      BLOB    NOT NULL,
        state            TEXT    NOT NULL,
        recovery_point   TEXT    NOT NULL,
        phase_results    TEXT    NOT NULL DEFAULT '{}',
        locked_until     INTEGER NULL,
        lock_version     INTEGER NOT NULL,
        claim_id         TEXT    NOT NULL,
        response_status  INTEGER NULL,
        response_headers TEXT    NULL,
        response_body    BLOB    NULL,
        response_key_id  TEXT    NULL,
        request          TEXT    NULL,
        created_at       INTEGER NOT NULL,
        finished_at      INTEGER NULL,
        failed_attempts  INTEGER NOT NULL DEFAULT 0,
        released         INTEGER NOT NULL DEFAULT 0,
        operator_note    TEXT    NULL,
        PRIMARY KEY (scope, key)
      )`,
      `CREATE INDEX IF NOT EXISTS "${table}_created_idx" ON ${t} (created_at)`,
      `CREATE INDEX IF NOT EXISTS "${table}_started_idx" ON ${t} (state, locked_until)`,
      `CREATE TABLE IF NOT EXISTS ${tokens} (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL)`,
      `INSERT OR IGNORE INTO ${tokens} (id, n) VALUES (1, 0)`,
    ],

    /** Whether the key table exists yet. Values: table name. */
    tableExists: "SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = ?",

    // ---- claim (protocol.md K3, Q1, Q2) -----------------------------------------------------

    /** A new fencing token, inside the write transaction. Values: none. */
    drawToken: `UPDATE ${tokens} SET n = n + 1 WHERE id = 1 RETURNING n`,

    /**
     * The key as it is (replay fast path, the claim's first look, and again inside the claim's
     * write transaction, where it is the newest committed row). Values: retention ms ×2, scope, key.
     */
    read: `SELECT ${ROW} FROM ${t} WHERE scope = ? AND key = ?`,

    /**
     * The claim (protocol.md Q1) inside `BEGIN IMMEDIATE`, after the read in the same
     * transaction found no row: nothing can insert it in between (one writer).
     * Values: scope, key, fingerprint, lease ms, token, claim id.
     */
    claim: `INSERT INTO ${t} (scope, key, fingerprint, state, recovery_point, phase_results, locked_until,
        lock_version, claim_id, created_at, failed_attempts, released)
      VALUES (?, ?, ?, 'started', 'start', '{}', ${NOW} + ?, ?, ?, ${NOW}, 0, 0) RETURNING lock_version`,

    /**
     * A row past retention counts as absent (protocol.md K6): replaced by a fresh claim, fenced
     * on the token read and only while its lease is not valid; the request snapshot goes too.
     * Values: fingerprint, lease ms, new token, new claim id, scope, key, token read, retention ms.
     */
    replaceExpired: `UPDATE ${t} SET fingerprint = ?, state = 'started', recovery_point = 'start', phase_results = '{}',
        locked_until = ${NOW} + ?, lock_version = ?, claim_id = ?, response_status = NULL, response_headers = NULL,
        response_body = NULL, response_key_id = NULL, request = NULL,
        created_at = ${NOW}, finished_at = NULL, failed_attempts = 0, released = 0, operator_note = NULL
      WHERE scope = ? AND key = ? AND lock_version = ? AND created_at <= ${NOW} - ? AND ${LEASE_OVER}
      RETURNING lock_version`,

    // ---- writes after the claim, fenced by the token (protocol.md K8, Q3-Q5) -------------------

    /**
     * Takeover of an expired or released lease (protocol.md Q3), a compare-and-set on the token
     * read, in the write transaction that drew the new token. A lease that ran out unreleased
     * counts a failed attempt (protocol.md K23): every assignment reads the row as it was.
     * Values: lease ms, new token, scope, key, token read.
     */
    takeOver: `UPDATE ${t} SET locked_until = ${NOW} + ?, lock_version = ?,
        failed_attempts = failed_attempts + (CASE WHEN released = 1 THEN 0 ELSE 1 END), released = 0
      WHERE scope = ? AND key = ? AND lock_version = ? AND state = 'started' AND ${LEASE_OVER}
      RETURNING claim_id, recovery_point, phase_results, failed_attempts`,

    /**
     * An atomic phase's recovery point and result (protocol.md Q4), last in the phase's
     * transaction; renews the lease. The result is stored as its JSON text, a string value under
     * the phase's name (a name is `[A-Za-z0-9_.-]`, safe inside the quoted path).
     * Values: phase, phase, result JSON text, lease ms, scope, key, token.
     */
    recordPhase: `UPDATE ${t} SET recovery_point = ?, phase_results = json_set(phase_results, '$."' || ? || '"', ?),
        locked_until = ${NOW} + ?
      WHERE ${FENCE} RETURNING lock_version`,

    /**
     * Finish (protocol.md Q5): done, the response stored, the lease cleared.
     * Values: status, headers JSON, body, key id (NULL plaintext), scope, key, token.
     */
    finish: `UPDATE ${t} SET state = 'done', recovery_point = 'finished', response_status = ?, response_headers = ?,
        response_body = ?, response_key_id = ?, locked_until = NULL, finished_at = ${NOW}
      WHERE ${FENCE} RETURNING lock_version`,

    /** Heartbeat (protocol.md K7). Values: lease ms, scope, key, token. */
    extendLease: `UPDATE ${t} SET locked_until = ${NOW} + ? WHERE ${FENCE} RETURNING lock_version`,

    /**
     * Release after a throw (protocol.md K10): the lease ends now, the recovery point stays, and
     * the next takeover does not count this attempt as a crash (K23). Values: scope, key, token.
     */
    release: `UPDATE ${t} SET locked_until = ${NOW}, released = 1 WHERE ${FENCE} RETURNING lock_version`,

    /** A failed attempt counted on a held key (protocol.md K23). Values: scope, key, token. */
    countFailure: `UPDATE ${t} SET failed_attempts = failed_attempts + 1 WHERE ${FENCE} RETURNING failed_attempts`,

    /** Discard before any phase (protocol.md K10). Values: scope, key, token. */
    discard: `DELETE FROM ${t} WHERE ${FENCE} AND recovery_point = 'start' RETURNING lock_version`,

    // ---- completer (protocol.md K12, K13) ------------------------------------------------------

    /** The request snapshot, before the work starts. Values: snapshot JSON, scope, key, token. */
    saveRequest: `UPDATE ${t} SET request = ? WHERE ${FENCE} RETURNING lock_version`,

    /**
     * Started keys within retention whose lease ended at least the grace ago, oldest lease first
     * (NULL sorts first). A read only: each is taken over by compare-and-set.
     * Values: retention ms ×2, grace ms, retention ms, limit.
     */
    listAbandoned: `SELECT scope, key, ${ROW}, request FROM ${t}
      WHERE state = 'started' AND (locked_until IS NULL OR locked_until <= ${NOW} - ?) AND created_at > ${NOW} - ?
      ORDER BY locked_until LIMIT ?`,

    /** Deletes a listed key on which nothing ran, if still as listed. Values: scope, key, token. */
    discardAbandoned: `DELETE FROM ${t} WHERE ${FENCE} AND recovery_point = 'start' AND request IS NULL AND ${LEASE_OVER}
      RETURNING lock_version`,

    // ---- operator (protocol.md K40-K42) ---------------------------------------------------------

    /**
     * Release (protocol.md K41): the lease ends now, the key is marked released under the new
     * token; without force only a lease that already ended.
     * Values: new token, note, scope, key, token read, force (0 or 1).
     */
    operatorRelease: `UPDATE ${t} SET locked_until = ${NOW}, released = 1, lock_version = ?, operator_note = ?
      WHERE scope = ? AND key = ? AND lock_version = ? AND state = 'started' AND (? = 1 OR ${LEASE_OVER})
      RETURNING lock_version`,

    /**
     * Forget (protocol.md K42): a finished key becomes a released claim at `start` with nothing
     * stored, under a new token and claim id; the fingerprint and `created_at` stay.
     * Values: new token, new claim id, note, scope, key, token read.
     */
    operatorForget: `UPDATE ${t} SET state = 'started', recovery_point = 'start', phase_results = '{}',
        locked_until = ${NOW}, released = 1, lock_version = ?, claim_id = ?,
        response_status = NULL, response_headers = NULL, response_body = NULL, response_key_id = NULL,
        finished_at = NULL, failed_attempts = 0, request = NULL, operator_note = ?
      WHERE scope = ? AND key = ? AND lock_version = ? AND state = 'done'
      RETURNING lock_version`,

    /**
     * Wait mode's poll (protocol.md K17, K51): what a finish, release, discard or takeover
     * changes (no row: discarded or swept). One primary-key read. Values: scope, key.
     */
    pollKey: `SELECT lock_version, state, released, locked_until FROM ${t} WHERE scope = ? AND key = ?`,

    // ---- retention (protocol.md K6, Q6) ------------------------------------------------------

    /** The cutoff in epoch ms, fixed when a sweep starts. Values: retention ms. */
    sweepCutoff: `SELECT ${NOW} - ? AS cutoff`,

    /** Dry run: rows at or before the cutoff, and those a sweep may delete. Values: cutoff. */
    sweepPlan: `SELECT COUNT(*) AS expired, COALESCE(SUM(${LEASE_OVER}), 0) AS sweepable FROM ${t} WHERE created_at <= ?`,

    /**
     * One retention batch, its own short write transaction: the oldest rows at or before the
     * cutoff whose lease is not valid (a live worker's key stays, protocol.md K6). The write lock
     * is held for one batch only, so claims get their turn between batches.
     * Values: cutoff, batch size.
     */
    sweepBatch: `DELETE FROM ${t} WHERE rowid IN (
        SELECT rowid FROM ${t} WHERE created_at <= ? AND ${LEASE_OVER} ORDER BY created_at LIMIT ?
      ) RETURNING 1 AS deleted`,

    // ---- operator reads (idem stats, idem inspect) -------------------------------------------

    /** One key in full, past retention or not. Values: retention ms, scope, key. */
    inspect: `SELECT scope, key, lower(hex(fingerprint)) AS fingerprint, state, recovery_point, phase_results, lock_version, claim_id,
        locked_until, ${LEASE_OVER} AS lease_expired, MAX(0, COALESCE(locked_until, 0) - ${NOW}) AS lease_remaining_ms,
        response_status, response_headers, length(response_body) AS response_bytes, response_key_id,
        created_at, finished_at, created_at <= ${NOW} - ? AS retention_expired, operator_note
      FROM ${t} WHERE scope = ? AND key = ?`,

    /** Table health in one scan. Values: retention ms, retention ms. */
    stats: `SELECT COUNT(*) AS total, COALESCE(SUM(state = 'started'), 0) AS started, COALESCE(SUM(state = 'done'), 0) AS done,
        MIN(created_at) AS oldest,
        COALESCE(SUM(created_at <= ${NOW} - ? AND ${LEASE_OVER}), 0) AS expired_unswept,
        COALESCE(SUM(state = 'started' AND ${LEASE_OVER} AND created_at > ${NOW} - ?), 0) AS abandoned,
        COALESCE(SUM(locked_until > ${NOW}), 0) AS live_leases
      FROM ${t}`,

    /** Drops, for tests and tools that made the table. */
    drop: [`DROP TABLE IF EXISTS ${t}`, `DROP TABLE IF EXISTS ${tokens}`],
  };
}
