/**
 * `PostgresPhases`: atomic phases for `RedisStore`. Claims, leases, tokens and replays stay in
 * Redis; each phase's local effects and its recorded result commit in ONE transaction of the
 * application's PostgreSQL, fenced by the same token (protocol.md K4, Q4).
 *
 * Fencing at the resource: the ledger row of a claim holds the highest token that has touched
 * it. A phase commit succeeds only if its token is not below that one (`WHERE token <=`); a
 * takeover first raises the row's token to its own (`fence`) and reads the phases from the
 * same row. The row lock orders the two: a stale worker's commit that lands first is seen by
 * the takeover's read (the phase is not run again), one that lands after is refused and
 * rolled back with its effects.
 *
 * The finish commits its last effects and the response here too, then writes the response
 * to Redis for replays. A crash between the two leaves Redis `started`: the next takeover
 * finds the response in the ledger, finishes the Redis key with it, and the retry replays.
 */
import type { Queryable, SqlClient, SqlExecutor } from '../postgres/client.js';
import { toExecutor } from '../postgres/client.js';
import { quoteTable } from '../postgres/sql.js';
import type { CommitRecord, Fenced, KeyRef, PhaseResults, StoredResponse } from '../store/types.js';

/** What a ledger knows of one claim after a takeover fenced it. */
export interface LedgerState {
  recoveryPoint: string;
  phaseResults: PhaseResults;
  /** Present when the finish committed here but may not have reached Redis. */
  response?: StoredResponse;
}

/**
 * Where `RedisStore` commits phases when they must be atomic with their effects.
 * @typeParam Tx the transaction handle passed to a phase's effects
 */
export interface PhaseLedger<Tx> {
  /** A takeover at `ref.token`: raise the fence to it and read the claim's phases; `fenced` when a newer token got there first. */
  fence(ref: KeyRef, claimId: string): Promise<LedgerState | 'fenced'>;
  /** Runs `effects` and records `record(value)` in one transaction, fenced by `ref.token`; rolled back when fenced or when `effects` throws. */
  commit<T>(ref: KeyRef, claimId: string, record: (value: T) => CommitRecord, effects?: (tx: Tx) => Promise<T>): Promise<Fenced<T>>;
}

/** Options of {@link PostgresPhases}. */
export interface PostgresPhasesOptions {
  /** A `pg.Pool` or a PGlite instance: the application's database, where the phases' effects live. */
  client: SqlClient;
  /** Ledger table (plain or schema-qualified identifier). @default 'idempotency_phases' */
  table?: string;
}

const FENCED = Symbol('fenced');

/** A {@link PhaseLedger} in PostgreSQL (or PGlite). Run {@link migrate} once before use. */
export class PostgresPhases implements PhaseLedger<Queryable> {
  private readonly db: SqlExecutor;
  private readonly t: string;

  /** @throws {TypeError} `client` is neither a pg.Pool nor a PGlite instance; `table` is not a plain identifier */
  constructor(options: PostgresPhasesOptions) {
    this.db = toExecutor(options.client);
    this.t = quoteTable(options.table ?? 'idempotency_phases');
  }

  /** Creates the ledger table if absent. One row per claim: (scope, key, claim id). */
  async migrate(): Promise<void> {
    await this.db.query(`CREATE TABLE IF NOT EXISTS ${this.t} (
      scope text NOT NULL, key text NOT NULL, claim_id uuid NOT NULL,
      token bigint NOT NULL, recovery_point text NOT NULL DEFAULT 'start',
      phase_results jsonb NOT NULL DEFAULT '{}'::jsonb, response jsonb,
      created_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (scope, key, claim_id))`);
  }

  /** Deletes ledger rows older than `retentionMs` (by the database clock); returns how many. */
  async sweep(retentionMs: number): Promise<number> {
    const { rows } = await this.db.query(
      `WITH d AS (DELETE FROM ${this.t} WHERE created_at <= now() - $1::int8 * interval '1 millisecond' RETURNING 1) SELECT count(*)::int AS n FROM d`,
      [retentionMs],
    );
    return Number(rows[0]?.n ?? 0);
  }

  async fence(ref: KeyRef, claimId: string): Promise<LedgerState | 'fenced'> {
    // Raise the fence (never lower it) and read the phases, in one statement under the row lock.
    const { rows } = await this.db.query(
      `INSERT INTO ${this.t} AS l (scope, key, claim_id, token) VALUES ($1, $2, $3, $4)
       ON CONFLICT (scope, key, claim_id) DO UPDATE SET token = GREATEST(l.token, EXCLUDED.token)
       RETURNING token::text AS token, recovery_point, phase_results, response`,
      [ref.scope, ref.key, claimId, String(ref.token)],
    );
    const row = rows[0]!;
    if (row.token !== String(ref.token)) return 'fenced';
    const state: LedgerState = { recoveryPoint: String(row.recovery_point), phaseResults: (row.phase_results ?? {}) as PhaseResults };
    if (row.response) {
      const r = row.response as { status: number; headers: Array<[string, string]>; body: string };
      state.response = { status: r.status, headers: r.headers, body: new Uint8Array(Buffer.from(r.body, 'base64')) };
    }
    return state;
  }

  async commit<T>(ref: KeyRef, claimId: string, record: (value: T) => CommitRecord, effects?: (tx: Queryable) => Promise<T>): Promise<Fenced<T>> {
    try {
      const value = await this.db.transaction(async (tx) => {
        const value = effects ? await effects(tx) : (undefined as T);
        const rec = record(value);
        const phase = rec.kind === 'phase' ? rec.phase : 'finished';
        const result = rec.kind === 'phase' ? JSON.stringify(rec.result ?? null) : 'null';
        const response =
          rec.kind === 'finish'
            ? JSON.stringify({ status: rec.response.status, headers: rec.response.headers, body: Buffer.from(rec.response.body).toString('base64') })
            : null;
        // The fenced write comes last: no row back means a newer token fenced this claim, and
        // the throw rolls the effects back with it.
        const { rows } = await this.db.queryOn(
          tx,
          `INSERT INTO ${this.t} AS l (scope, key, claim_id, token, recovery_point, phase_results, response)
           VALUES ($1, $2, $3, $4, $5, CASE WHEN $7::jsonb IS NULL THEN jsonb_build_object($5::text, $6::jsonb) ELSE '{}'::jsonb END, $7::jsonb)
           ON CONFLICT (scope, key, claim_id) DO UPDATE SET token = EXCLUDED.token, recovery_point = EXCLUDED.recovery_point,
             phase_results = l.phase_results || EXCLUDED.phase_results, response = EXCLUDED.response
           WHERE l.token <= EXCLUDED.token AND l.response IS NULL
           RETURNING 1 AS ok`,
          [ref.scope, ref.key, claimId, String(ref.token), phase, result, response],
        );
        if (rows.length === 0) throw FENCED;
        return value;
      });
      return { outcome: 'ok', value };
    } catch (error) {
      if (error === FENCED) return { outcome: 'fenced' };
      throw error;
    }
  }
}
