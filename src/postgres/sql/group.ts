import { CLAIMED_ROW, ROW, type TableNames } from './table.js';

/**
 * Group commit (protocol.md K19): the claims, and the finishes without local effects, of
 * DIFFERENT keys that arrive within a short window share one statement and so one commit.
 * Plain table only (see `groupCommit` in options.ts for partitioned mode).
 *
 * The batch travels as ONE parameter, a JSON array decoded by `json_to_recordset` with an
 * explicit type per column, rather than as a multi-row `VALUES` list of scalar parameters:
 * the statement text is the same for every batch size, so it is prepared once per
 * connection (a `VALUES` list would be a new statement, parsed and planned, for each size),
 * no parameter needs a cast in a `VALUES` row, and no batch can reach the protocol's limit of
 * 65,535 bind parameters. Bytes travel as hex (fingerprints) or base64 (bodies).
 *
 * Lock order: every batch touches its rows sorted by (scope, key), so two batches that share
 * keys wait for each other in one order and cannot deadlock.
 */
export function groupStatements({ t }: TableNames) {
  // The claim's result row, as `CLAIMED_ROW`, but naming its key: a batch answers many keys.
  const claimedRow = CLAIMED_ROW.replace('NULL::text AS scope, NULL::text AS key', 'scope, key');
  if (claimedRow === CLAIMED_ROW) throw new Error('idem/postgres: CLAIMED_ROW changed shape');
  return {
    /**
     * The claim (protocol.md Q1, Q2) of many keys in one statement and one commit: for each
     * key the existing row (read first, as `claim` does) or a new row, in one
     * `INSERT … ON CONFLICT DO NOTHING RETURNING`. Each result row names its key; a key with
     * no result row lost a race to a claim committed after this statement's snapshot, and its
     * caller takes the ordinary path (protocol.md K19). The caller never sends one key twice
     * in a batch. $1 JSON array of { s: scope, k: key, f: fingerprint hex, l: lease ms,
     * r: retention ms }.
     */
    groupClaim: `WITH input AS (
        SELECT * FROM json_to_recordset($1::json) AS i(s text, k text, f text, l int8, r int8)
      ), existing AS (
        SELECT ${ROW}, created_at <= now() - input.r * interval '1 millisecond' AS retention_expired,
          (date_part('epoch', created_at - now()) * 1000 + input.r)::float8 AS retention_remaining_ms
        FROM ${t} AS kt JOIN input ON kt.scope = input.s AND kt.key = input.k
      ), claimed AS (
        INSERT INTO ${t} (scope, key, fingerprint, locked_until)
        SELECT input.s, input.k, decode(input.f, 'hex'), now() + input.l * interval '1 millisecond'
        FROM input
        WHERE NOT EXISTS (SELECT 1 FROM existing WHERE existing.scope = input.s AND existing.key = input.k)
        ORDER BY input.s, input.k
        ON CONFLICT (scope, key) DO NOTHING
        RETURNING scope, key, lock_version, claim_id
      )
      ${claimedRow}
      FROM claimed
      UNION ALL
      SELECT 'exists', existing.* FROM existing`,

    /**
     * The finish (protocol.md Q5) of many keys in one statement, each row fenced by ITS token:
     * a key whose token is no longer current is left as it is and absent from the result. The
     * rows are locked in (scope, key) order first (see above). Inline bodies only.
     * $1 JSON array of { s: scope, k: key, v: token, st: status, h: headers JSON text,
     * b: body base64, kid: key id or null }. Returns the (scope, key) finished.
     */
    groupFinish: `WITH input AS (
        SELECT * FROM json_to_recordset($1::json) AS i(s text, k text, v int8, st int, h text, b text, kid text)
      ), locked AS (
        SELECT kt.scope, kt.key FROM ${t} AS kt JOIN input ON kt.scope = input.s AND kt.key = input.k
        WHERE kt.lock_version = input.v AND kt.state = 'started'
        ORDER BY kt.scope, kt.key
        FOR UPDATE OF kt
      )
      UPDATE ${t} AS kt SET state = 'done', recovery_point = 'finished', response_status = input.st,
        response_headers = input.h::jsonb, response_body = decode(input.b, 'base64'), response_body_ref = NULL,
        response_key_id = input.kid, locked_until = NULL, finished_at = now()
      FROM input, locked
      WHERE kt.scope = input.s AND kt.key = input.k AND locked.scope = input.s AND locked.key = input.k
        AND kt.lock_version = input.v AND kt.state = 'started'
      RETURNING kt.scope, kt.key`,

    /**
     * A batched consumer's read (protocol.md K39 1): the rows of the keys that exist, as the
     * claim's `existing` rows; nothing is written. $1 JSON array of { s: scope, k: key,
     * r: retention ms }.
     */
    batchRead: `WITH input AS (
        SELECT * FROM json_to_recordset($1::json) AS i(s text, k text, r int8)
      )
      SELECT 'exists' AS kind, ${ROW}, created_at <= now() - input.r * interval '1 millisecond' AS retention_expired,
        (date_part('epoch', created_at - now()) * 1000 + input.r)::float8 AS retention_remaining_ms
      FROM ${t} AS kt JOIN input ON kt.scope = input.s AND kt.key = input.k`,

    /**
     * A batched consumer's finish (protocol.md K39 1): each key's row inserted already
     * finished, in the transaction of its effects, keys in (scope, key) order. A key whose row
     * appeared since the read (a claim that came first) is absent from the result, and the
     * caller rolls the batch back. $1 JSON array of { s: scope, k: key, f: fingerprint hex,
     * st: status, h: headers JSON text, b: body base64, kid: key id or null }. Returns the
     * (scope, key) inserted.
     */
    batchInsertDone: `INSERT INTO ${t} (scope, key, fingerprint, state, recovery_point, response_status, response_headers,
        response_body, response_key_id, finished_at)
      SELECT i.s, i.k, decode(i.f, 'hex'), 'done', 'finished', i.st, i.h::jsonb, decode(i.b, 'base64'), i.kid, now()
      FROM json_to_recordset($1::json) AS i(s text, k text, f text, st int, h text, b text, kid text)
      ORDER BY i.s, i.k
      ON CONFLICT (scope, key) DO NOTHING
      RETURNING scope, key`,
  };
}
