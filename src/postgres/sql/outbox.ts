/**
 * The transactional outbox's statements (`<table>_outbox`): messages enqueued in a phase's
 * transaction, claimed by relays with `FOR UPDATE SKIP LOCKED`, marked sent after the broker
 * confirmed them.
 */
import { quoteTable } from './table.js';

/** Statements of one outbox table. */
export interface OutboxStatements {
  /** The table and its index of unsent rows, if missing. */
  migrate: string[];
  /** $1 message id, $2 destination, $3 body, $4 content type. A repeated id is ignored. */
  enqueue: string;
  /** $1 batch size: the oldest unsent rows no other relay holds, locked until the transaction ends. */
  claim: string;
  /** $1 row ids: marks them sent. */
  markSent: string;
  /** $1 age in ms: deletes rows sent longer ago (batch of $2). */
  deleteSent: string;
  /** Unsent rows. */
  pending: string;
}

/** The outbox statements for messages of the key table `table`, in `<table>_outbox`. */
export function outboxStatements(table: string): OutboxStatements {
  const name = `${table}_outbox`;
  const o = quoteTable(name);
  const bare = name.replaceAll('.', '_');
  return {
    migrate: [
      `CREATE TABLE IF NOT EXISTS ${o} (
        id bigserial PRIMARY KEY,
        message_id text NOT NULL UNIQUE,
        destination text NOT NULL,
        body bytea NOT NULL,
        content_type text,
        created_at timestamptz NOT NULL DEFAULT now(),
        sent_at timestamptz
      )`,
      `CREATE INDEX IF NOT EXISTS "${bare}_unsent" ON ${o} (id) WHERE sent_at IS NULL`,
    ],
    enqueue: `INSERT INTO ${o} (message_id, destination, body, content_type) VALUES ($1, $2, $3, $4) ON CONFLICT (message_id) DO NOTHING`,
    claim: `SELECT id, message_id, destination, body, content_type FROM ${o} WHERE sent_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`,
    markSent: `UPDATE ${o} SET sent_at = now() WHERE id = ANY($1::bigint[])`,
    deleteSent: `DELETE FROM ${o} WHERE id IN (SELECT id FROM ${o} WHERE sent_at < now() - make_interval(secs => $1::double precision / 1000) LIMIT $2 FOR UPDATE SKIP LOCKED)`,
    pending: `SELECT count(*)::int AS n FROM ${o} WHERE sent_at IS NULL`,
  };
}
