/**
 * `PostgresPhases`: atomic phases for `RedisStore`. Claims, leases, tokens and replays stay in
 * Redis; each phase's local effects and its recorded result commit in ONE transaction of the
 * application's PostgreSQL, fenced by the same token (protocol.md K4, Q4).
 *
 * Fencing at the resource: one ledger row per (scope, key) holds the token of the worker that
 * owns the key now. Every new owner writes its token there first (`fence`: after a claim and
 * after a takeover, raising it); a phase commit succeeds only with that exact token
 * (`WHERE token = $t`), as in `PostgresStore`. The row lock orders a takeover's fence and a
 * stale worker's commit: a commit that lands first is seen by the takeover's read (the phase
 * is not run again), one that lands after is refused and rolled back with its effects.
 *
 * The ledger is the recovery point when Redis forgets a claim (protocol.md K22): a fence with
 * another claim id keeps the row's claim (id, fingerprint, phases, response) when a phase or
 * the finish committed under it within the retention, and starts empty only when nothing did
 * (a discarded claim) or the row is past retention. A token LOWER than the row's (a Redis that
 * restarted its counter on a replica whose clock is behind) supersedes it only when the caller
 * confirms that token owns the key in Redis now (`owns`), by compare-and-set on the token read.
 *
 * The finish commits its last effects and the response here too, then writes the response
 * to Redis for replays. A crash between the two leaves Redis `started` (or forgets the key):
 * the next claim or takeover finds the response in the ledger, finishes the Redis key with
 * it, and the retry replays.
 */
import type { Queryable, SqlClient, SqlExecutor } from '../postgres/client.js';
import { toExecutor } from '../postgres/executor.js';
import { quoteTable } from '../postgres/sql.js';
import { InvalidOptionError } from '../core/errors.js';
import { DEFAULT_STORE_TIMEOUT_MS } from '../store/deadline.js';
import type { CommitRecord, Fenced, KeyRef, PhaseResults, StoredResponse } from '../store/types.js';

/** What a ledger knows of the key's claim once a new owner fenced it. */
export interface LedgerState {
  /**
   * The claim the key's phases belong to: the caller's, or an earlier one whose progress the
   * ledger kept (Redis forgot it, protocol.md K22); the caller must then adopt it.
   */
  claimId: string;
  /** That claim's request fingerprint (hex), when the ledger knows it. */
  fingerprint?: string;
  recoveryPoint: string;
  phaseResults: PhaseResults;
  /** Present when the finish committed here but may not have reached Redis. */
  response?: StoredResponse;
}

/** What the new owner tells {@link PhaseLedger.fence} about its claim. */
export interface FenceClaim {
  /** The claim id Redis holds for the key. */
  claimId: string;
  /** The claim's request fingerprint (hex), kept with a new claim. */
  fingerprint?: string;
  /**
   * A fresh claim's retention: progress of another claim id older than this (database clock)
   * belongs to a claim whose retention ended, and is dropped. Absent: kept at any age.
   */
  retentionMs?: number;
  /**
   * Asked only when the ledger holds a higher token: true when `ref.token` owns the key in
   * Redis now (its counter restarted lower after a failover), so it may supersede that token.
   */
  owns?: () => Promise<boolean>;
}

/**
 * Where `RedisStore` commits phases when they must be atomic with their effects.
 * @typeParam Tx the transaction handle passed to a phase's effects
 */
export interface PhaseLedger<Tx> {
  /**
   * A new owner at `ref.token` (a claim or a takeover): fence the ledger at that token and read
   * the key's phases; `fenced` when another token holds the ledger (higher, or the caller does
   * not own the key in Redis).
   */
  fence(ref: KeyRef, claim: FenceClaim): Promise<LedgerState | 'fenced'>;
  /** Runs `effects` and records `record(value)` in one transaction, fenced by `ref.token`; rolled back when fenced or when `effects` throws. */
  commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects?: (tx: Tx) => Promise<T>): Promise<Fenced<T>>;
}

/** Options of {@link PostgresPhases}. */
export interface PostgresPhasesOptions {
  /** A `pg.Pool` or a PGlite instance: the application's database, where the phases' effects live. */
  client: SqlClient;
  /** Ledger table (plain or schema-qualified identifier). @default 'idempotency_phases' */
  table?: string;
  /**
   * Deadline of each ledger statement of a request (fence, phase commit) on a `pg.Pool`, in ms,
   * as `PostgresStore`'s `storeTimeoutMs` (protocol.md H17): past it the call fails with a
   * `StoreTimeoutError` and the connection is destroyed. `migrate` and `sweep` have none. `0`:
   * no deadline. PGlite runs in process and has none.
   * @default 5000
   */
  storeTimeoutMs?: number;
}

const FENCED = Symbol('fenced');

/**
 * A fence keeps the row's claim when it is the caller's (a takeover), or when a phase or the
 * finish committed under it within the fresh claim's retention ($6; NULL: any age).
 */
const KEEP = `(l.claim_id = EXCLUDED.claim_id OR ((l.recovery_point <> 'start' OR l.response IS NOT NULL)
  AND ($6::int8 IS NULL OR l.created_at > now() - $6::int8 * interval '1 millisecond')))`;

/** A {@link PhaseLedger} in PostgreSQL (or PGlite). Run {@link migrate} once before use. */
export class PostgresPhases implements PhaseLedger<Queryable> {
  /** The request path's executor: every statement under `storeTimeoutMs`. */
  private readonly db: SqlExecutor;
  /** `migrate` and `sweep`: no deadline (a migration may wait for a lock, a sweep outlast it). */
  private readonly maintenance: SqlExecutor;
  private readonly t: string;

  /**
   * @throws {TypeError} `client` is neither a pg.Pool nor a PGlite instance; `table` is not a plain identifier
   * @throws {InvalidOptionError} `storeTimeoutMs` is not a number >= 0
   */
  constructor(options: PostgresPhasesOptions) {
    const timeoutMs = options.storeTimeoutMs ?? DEFAULT_STORE_TIMEOUT_MS;
    if (!(typeof timeoutMs === 'number' && timeoutMs >= 0))
      throw new InvalidOptionError('idem/redis: PostgresPhases storeTimeoutMs must be a number of ms >= 0 (0: no deadline)');
    this.db = toExecutor(options.client, { timeoutMs });
    this.maintenance = toExecutor(options.client);
    this.t = quoteTable(options.table ?? 'idempotency_phases');
  }

  /** Creates the ledger table if absent. One row per (scope, key), for its current claim. */
  async migrate(): Promise<void> {
    await this.maintenance.query(`CREATE TABLE IF NOT EXISTS ${this.t} (
      scope text NOT NULL, key text NOT NULL, claim_id uuid NOT NULL,
      token bigint NOT NULL, recovery_point text NOT NULL DEFAULT 'start',
      phase_results jsonb NOT NULL DEFAULT '{}'::jsonb, response jsonb,
      created_at timestamptz NOT NULL DEFAULT now(), fingerprint text,
      PRIMARY KEY (scope, key))`);
    // Ledgers made before the fingerprint was kept (protocol.md K22).
    await this.maintenance.query(`ALTER TABLE ${this.t} ADD COLUMN IF NOT EXISTS fingerprint text`);
  }

  /** Deletes ledger rows older than `retentionMs` (by the database clock); returns how many. */
  async sweep(retentionMs: number): Promise<number> {
    const { rows } = await this.maintenance.query(
      `WITH d AS (DELETE FROM ${this.t} WHERE created_at <= now() - $1::int8 * interval '1 millisecond' RETURNING 1) SELECT count(*)::int AS n FROM d`,
      [retentionMs],
    );
    return Number(rows[0]?.n ?? 0);
  }

  async fence(ref: KeyRef, claim: FenceClaim): Promise<LedgerState | 'fenced'> {
    let row = await this.raise(ref, claim, null);
    if (!row && claim.owns) {
      // A higher token holds the row. protocol.md K22: a Redis that forgot the key may count
      // from lower again; its owner supersedes exactly the token read, once Redis confirms it.
      const { rows } = await this.db.query(`SELECT token FROM ${this.t} WHERE scope = $1 AND key = $2`, [ref.scope, ref.key]);
      const held = rows[0]?.token;
      if (held !== undefined && Number(held) !== ref.token && (await claim.owns())) row = await this.raise(ref, claim, String(held));
    }
    if (!row) return 'fenced';
    const state: LedgerState = {
      claimId: String(row.claim_id),
      recoveryPoint: String(row.recovery_point),
      phaseResults: (row.phase_results ?? {}) as PhaseResults,
    };
    if (row.fingerprint) state.fingerprint = String(row.fingerprint);
    if (row.response) {
      const r = row.response as { status: number; headers: Array<[string, string]>; body: string };
      state.response = { status: r.status, headers: r.headers, body: new Uint8Array(Buffer.from(r.body, 'base64')) };
    }
    return state;
  }

  /**
   * One statement under the row lock: write `ref.token` where the row's is lower (or is exactly
   * `over`), keeping the row's claim when {@link KEEP} says so, else starting `claim` empty.
   */
  private async raise(ref: KeyRef, claim: FenceClaim, over: string | null) {
    const keep = (kept: string, fresh: string) => `CASE WHEN ${KEEP} THEN ${kept} ELSE ${fresh} END`;
    const { rows } = await this.db.query(
      `INSERT INTO ${this.t} AS l (scope, key, claim_id, token, fingerprint) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (scope, key) DO UPDATE SET token = EXCLUDED.token,
         claim_id = ${keep('l.claim_id', 'EXCLUDED.claim_id')},
         fingerprint = ${keep('coalesce(l.fingerprint, EXCLUDED.fingerprint)', 'EXCLUDED.fingerprint')},
         recovery_point = ${keep('l.recovery_point', "'start'")},
         phase_results = ${keep('l.phase_results', "'{}'::jsonb")},
         response = ${keep('l.response', 'NULL')},
         created_at = ${keep('l.created_at', 'now()')}
       WHERE l.token < EXCLUDED.token OR l.token = $7::int8
       RETURNING claim_id, fingerprint, recovery_point, phase_results, response`,
      [
        ref.scope,
        ref.key,
        claim.claimId,
        String(ref.token),
        claim.fingerprint ?? null,
        claim.retentionMs === undefined ? null : Math.floor(claim.retentionMs),
        over,
      ],
    );
    return rows[0];
  }

  async commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects?: (tx: Queryable) => Promise<T>): Promise<Fenced<T>> {
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
          `UPDATE ${this.t} SET recovery_point = $4,
             phase_results = CASE WHEN $6::jsonb IS NULL THEN phase_results || jsonb_build_object($4::text, $5::jsonb) ELSE phase_results END,
             response = $6::jsonb
           WHERE scope = $1 AND key = $2 AND token = $3 AND response IS NULL
           RETURNING 1 AS ok`,
          [ref.scope, ref.key, String(ref.token), phase, result, response],
        );
        if (rows.length === 0) throw FENCED;
        return value;
      });
      return { kind: 'ok', value };
    } catch (error) {
      if (error === FENCED) return { kind: 'fenced' };
      throw error;
    }
  }
}
