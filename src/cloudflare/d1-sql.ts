/**
 * The D1 store's statements (protocol.md K57): the SQLite store's (src/sqlite/sql.ts, K51), D1
 * being SQLite, with what D1's lack of interactive transactions changes. A claim, a takeover and
 * an operator write each draw their token in the same `batch()` (one transaction) as the write
 * that uses it, the write reading the drawn token by a subquery instead of a bound value; the
 * claim is one upsert; a phase's writes are guarded by a statement that fails the batch when
 * the token no longer holds.
 */
import { LEASE_OVER, NOW, quoteTable, sqliteStatements } from '../sqlite/sql.js';

/** The statements of one D1 key table; see {@link d1Statements}. */
export type D1Statements = ReturnType<typeof d1Statements>;

/** `sql` with its SET's bound token (`lock_version = ?,`) read from the token row instead. */
function drawnToken(sql: string, tokens: string): string {
  const at = sql.indexOf('lock_version = ?,');
  if (at < 0) throw new Error('idem/cloudflare: a D1 statement lost its token assignment');
  return `${sql.slice(0, at)}lock_version = (SELECT n FROM ${tokens} WHERE id = 1),${sql.slice(at + 'lock_version = ?,'.length)}`;
}

/**
 * The statements on `table` (`<table>`, `<table>_tokens`, the SQLite store's tables).
 * @throws {Error} for a table name that is not a plain identifier
 */
export function d1Statements(table: string) {
  const sql = sqliteStatements(table);
  const t = quoteTable(table);
  const tokens = quoteTable(`${table}_tokens`);
  return {
    ...sql,
    /**
     * The claim (protocol.md Q1, K6) as ONE statement, after `drawToken` in the same batch: a new
     * row, or a row past retention whose lease is over replaced whole; a live row is left as it is
     * and nothing is returned (the batch's next statement, `read`, gives it).
     * Values: scope, key, fingerprint, lease ms, claim id, retention ms.
     */
    claim: `INSERT INTO ${t} (scope, key, fingerprint, state, recovery_point, phase_results, locked_until,
        lock_version, claim_id, created_at, failed_attempts, released)
      VALUES (?, ?, ?, 'started', 'start', '{}', ${NOW} + ?, (SELECT n FROM ${tokens} WHERE id = 1), ?, ${NOW}, 0, 0)
      ON CONFLICT (scope, key) DO UPDATE SET fingerprint = excluded.fingerprint, state = 'started', recovery_point = 'start',
        phase_results = '{}', locked_until = excluded.locked_until, lock_version = excluded.lock_version,
        claim_id = excluded.claim_id, response_status = NULL, response_headers = NULL, response_body = NULL,
        response_key_id = NULL, request = NULL, created_at = excluded.created_at, finished_at = NULL,
        failed_attempts = 0, released = 0, operator_note = NULL
      WHERE created_at <= ${NOW} - ? AND ${LEASE_OVER}
      RETURNING lock_version, claim_id`,
    /** The takeover (protocol.md Q3) with the token `drawToken` drew before it in the batch. Values: lease ms, scope, key, token read. */
    takeOver: drawnToken(sql.takeOver, tokens),
    /** protocol.md K41 with the drawn token. Values: note, scope, key, token read, force (0 or 1). */
    operatorRelease: drawnToken(sql.operatorRelease, tokens),
    /** protocol.md K42 with the drawn token. Values: claim id, note, scope, key, token read. */
    operatorForget: drawnToken(sql.operatorForget, tokens),
    /**
     * First in a phase's batch: fails the batch (NOT NULL on the token row, rolling back every
     * statement in it) unless the key is started and held by this token (protocol.md K8, K57).
     * Values: scope, key, token.
     */
    guard: `UPDATE ${tokens} SET n = NULL WHERE id = 1 AND NOT EXISTS (
        SELECT 1 FROM ${t} WHERE scope = ? AND key = ? AND lock_version = ? AND state = 'started')`,
    /** What D1 says when the guard failed the batch. */
    guardFailed: `${table}_tokens.n`,
  };
}
