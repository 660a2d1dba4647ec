import { InvalidOptionError } from '../core/errors.js';
import type { OutgoingMessage, Publisher } from '../store/outbox-message.js';
import type { Queryable, SqlClient, SqlExecutor } from './client.js';
import { toExecutor } from './executor.js';
import { type OutboxStatements, outboxStatements } from './sql/outbox.js';

/** Options of {@link Outbox}. */
export interface OutboxOptions {
  /** A `pg.Pool` or a PGlite instance: the database of the key table. */
  client: SqlClient;
  /**
   * The key table the outbox belongs to; the outbox is `<table>_outbox`.
   * @default 'idempotency_keys'
   */
  table?: string;
}

/** A message to enqueue: its id (downstream dedup keys on it), destination and payload. */
export interface OutboxMessage {
  /** 1-255 characters, unique: enqueuing an id twice keeps the first. */
  id: string;
  /** A routing key (RabbitMQ) or subject (NATS). */
  destination: string;
  /** Bytes, or text (stored as UTF-8). */
  body: Uint8Array | string;
  /** @default null, or `application/json` when enqueued with {@link Outbox.enqueueJson} */
  contentType?: string | null;
}

/**
 * A transactional outbox in `<table>_outbox`: a phase enqueues outgoing messages on its own
 * transaction handle, so they commit with the phase's effects or not at all (`protocol.md K4`);
 * an {@link OutboxRelay} publishes them later.
 *
 * @example
 * ```ts
 * const outbox = new Outbox({ client: pool });
 * await outbox.migrate();
 * await ctx.complete(async (tx) => {
 *   await insertInvoice(tx, order);
 *   await outbox.enqueueJson(tx, { id: `invoice-created:${order.id}`, destination: 'invoices', body: invoice });
 * });
 * ```
 */
export class Outbox {
  /** The outbox table's name, `<table>_outbox`. */
  readonly table: string;
  /** @internal */
  readonly sql: OutboxStatements;
  /** @internal */
  readonly db: SqlExecutor;

  /** @throws {InvalidOptionError} for a bad table name or a missing client. */
  constructor(options: OutboxOptions) {
    if (!options?.client) throw new InvalidOptionError('idem/postgres: Outbox needs { client }');
    const table = options.table ?? 'idempotency_keys';
    try {
      this.sql = outboxStatements(table);
    } catch (error) {
      throw new InvalidOptionError((error as Error).message);
    }
    this.table = `${table}_outbox`;
    this.db = toExecutor(options.client);
  }

  /** Creates the outbox table and its index when missing. Idempotent; safe on several hosts at once. */
  async migrate(): Promise<void> {
    await this.db.transaction(async (tx) => {
      // One migration at a time: CREATE ... IF NOT EXISTS alone races on the catalog.
      await tx.query('SELECT pg_advisory_xact_lock(hashtext($1))', [this.table]);
      for (const statement of this.sql.migrate) await tx.query(statement);
    });
  }

  /**
   * Enqueues messages on `tx`, the transaction of a phase or of `complete`: they commit with its
   * effects, or roll back with them.
   *
   * @throws {TypeError} for a message without id, destination or body.
   */
  async enqueue(tx: Queryable, ...messages: OutboxMessage[]): Promise<void> {
    for (const m of messages) {
      if (!m || typeof m.id !== 'string' || m.id.length === 0 || m.id.length > 255 || typeof m.destination !== 'string' || !m.destination) {
        throw new TypeError('idem: an outbox message needs an id (1-255 characters) and a destination');
      }
      const body = typeof m.body === 'string' ? new TextEncoder().encode(m.body) : m.body;
      if (!(body instanceof Uint8Array)) throw new TypeError('idem: an outbox message body must be bytes or text');
      await tx.query(this.sql.enqueue, [m.id, m.destination, body, m.contentType ?? null]);
    }
  }

  /** {@link enqueue} with a JSON body (`application/json`). */
  enqueueJson(tx: Queryable, message: { id: string; destination: string; body: unknown }): Promise<void> {
    return this.enqueue(tx, { id: message.id, destination: message.destination, body: JSON.stringify(message.body), contentType: 'application/json' });
  }

  /** The number of messages not yet published. */
  async pending(): Promise<number> {
    return Number((await this.db.query(this.sql.pending)).rows[0]?.n ?? 0);
  }

  /**
   * Deletes messages sent more than `olderThanMs` ms ago (database clock), at most `batchSize`.
   * @returns the number deleted
   */
  async deleteSent(options: { olderThanMs: number; batchSize?: number }): Promise<number> {
    const result = await this.db.query(this.sql.deleteSent, [options.olderThanMs, options.batchSize ?? 1000]);
    return Number(result.rowCount ?? result.affectedRows ?? 0);
  }
}

/** Options of {@link OutboxRelay}. */
export interface OutboxRelayOptions {
  outbox: Outbox;
  /** Publishes one message and resolves on the broker's confirm: `amqpPublisher` (idem/amqp), `jetStreamPublisher` (idem/nats). */
  publish: Publisher;
  /**
   * Rows claimed per turn.
   * @default 100
   */
  batchSize?: number;
}

/**
 * Publishes an {@link Outbox}'s messages and marks them sent. Each turn claims the oldest unsent
 * rows with `FOR UPDATE SKIP LOCKED` in one transaction, publishes them (waiting for each
 * confirm) and marks them sent in the same transaction, so relays on several hosts never
 * publish the same row at the same time. A relay that dies after publishing and before its
 * commit leaves the rows unsent: another turn publishes them again with the same message id,
 * which JetStream's duplicate window and downstream idem consumers drop.
 */
export class OutboxRelay {
  private readonly outbox: Outbox;
  private readonly publish: Publisher;
  private readonly batchSize: number;

  /** @throws {InvalidOptionError} for a missing outbox or publisher, or a bad batch size. */
  constructor(options: OutboxRelayOptions) {
    if (!options?.outbox || typeof options.publish !== 'function') {
      throw new InvalidOptionError('idem/postgres: OutboxRelay needs { outbox, publish }');
    }
    this.outbox = options.outbox;
    this.publish = options.publish;
    this.batchSize = options.batchSize ?? 100;
    if (!Number.isInteger(this.batchSize) || this.batchSize < 1) throw new InvalidOptionError('idem/postgres: batchSize must be a positive integer');
  }

  /**
   * One turn: claims up to `batchSize` unsent rows, publishes them in order, marks the published
   * ones sent. A publish that fails stops the turn: the rows published before it are still
   * marked sent, and the error is thrown after the commit.
   *
   * @returns how many messages were published
   */
  async relayOnce(): Promise<number> {
    const { db, sql } = this.outbox;
    let failure: unknown;
    const sent = await db.transaction(async (tx) => {
      const rows = (await db.queryOn(tx, sql.claim, [this.batchSize])).rows;
      const ids: string[] = [];
      for (const row of rows) {
        const message: OutgoingMessage = {
          id: String(row.message_id),
          destination: String(row.destination),
          body: row.body as Uint8Array,
          contentType: row.content_type == null ? null : String(row.content_type),
        };
        try {
          await this.publish(message);
        } catch (error) {
          failure = error;
          break;
        }
        ids.push(String(row.id));
      }
      if (ids.length > 0) await db.queryOn(tx, sql.markSent, [ids]);
      return ids.length;
    });
    if (failure !== undefined) throw failure;
    return sent;
  }

  /**
   * Relays until `signal` aborts: turns back to back while there is work, then one turn every
   * `idleMs`. A failed turn (broker or database down) waits `idleMs` and tries again; errors go
   * to `onError`.
   */
  async run(options: { signal: AbortSignal; idleMs?: number; onError?: (error: unknown) => void }): Promise<void> {
    const idleMs = options.idleMs ?? 200;
    while (!options.signal.aborted) {
      let sent = 0;
      try {
        sent = await this.relayOnce();
      } catch (error) {
        options.onError?.(error);
      }
      if (sent === 0 && !options.signal.aborted) await sleep(idleMs, options.signal);
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}
