/**
 * Group commit (protocol.md K19): claims, and finishes without local effects, of different
 * keys that arrive within `windowMs` of each other go to the database as one statement
 * (sql/group.ts), so one commit (one WAL flush, `synchronous_commit` untouched) serves the
 * whole batch. Each caller gets exactly its own outcome; anything a batch cannot decide for a
 * caller goes through the ordinary per-key path.
 */
import { performance } from 'node:perf_hooks';
import type { ClaimInput, KeyRef } from '../store/types.js';
import type { SqlExecutor } from './client.js';
import type { StoredForm } from '../store/stored-form.js';
import type { Row } from './rows.js';

/** Options of group commit (`PostgresStore` option `groupCommit`). */
export interface GroupCommitOptions {
  /**
   * How long, in ms, the first claim (or finish) of a batch waits for others to join it.
   * `0` gathers what arrives in the same turn of the event loop. Every caller may wait this
   * long on top of `storeTimeoutMs`.
   * @default 2
   */
  windowMs?: number;
  /**
   * Keys per batch; a batch that fills up goes at once, before its window ends.
   * @default 64
   */
  maxBatch?: number;
  /** Called after each batch statement, for metrics: what it was, how many keys, how long. */
  onBatch?: (batch: GroupBatch) => void;
}

/** One batch statement, as reported to `onBatch`. */
export interface GroupBatch {
  kind: 'claim' | 'finish';
  /** Keys in the statement. */
  size: number;
  /** The statement's time in ms, the wait for a connection included. */
  durationMs: number;
  /** The statement failed; its callers went on alone (a data error) or failed with it. */
  failed: boolean;
}

/** The statements group commit runs: the batches and, for their fallback, the ordinary ones. */
export interface GroupSql {
  groupClaim: string;
  groupFinish: string;
  claim: string;
  finish: string;
}

interface Waiter<I, O> {
  id: string;
  input: I;
  resolve(value: O): void;
  reject(error: unknown): void;
}

/**
 * A server error that concerns the rows, not the connection: a value the table refuses
 * (SQLSTATE class 22, 23, or a trigger's P0001) or a deadlock or serialization failure. The
 * batch committed nothing, so each of its callers runs its own statement: one bad key fails
 * alone. Anything else (a deadline, a lost connection) fails every caller, as it would have
 * failed each of them alone; a retry of each would double their wait.
 */
function rowError(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' && (/^2[23]/.test(code) || code === 'P0001' || code === '40P01' || code === '40001');
}

/** Gathers items for up to `windowMs` or `maxBatch` items, then hands them to `flush`. */
class Batcher<I, O> {
  private pending: Array<Waiter<I, O>> = [];
  private ids = new Set<string>();
  /** The open batch's departure: a timer for `windowMs`, or the next turn of the event loop for 0. */
  private timer: ReturnType<typeof setTimeout> | undefined;
  private immediate: ReturnType<typeof setImmediate> | undefined;

  constructor(
    private readonly windowMs: number,
    private readonly maxBatch: number,
    private readonly flush: (batch: Array<Waiter<I, O>>) => Promise<void>,
  ) {}

  /** Adds `input` under `id`; undefined when `id` is already in the open batch (the caller goes alone). */
  add(id: string, input: I): Promise<O> | undefined {
    if (this.ids.has(id)) return undefined;
    const promise = new Promise<O>((resolve, reject) => this.pending.push({ id, input, resolve, reject }));
    this.ids.add(id);
    if (this.pending.length >= this.maxBatch) this.go();
    else if (this.pending.length === 1) {
      if (this.windowMs > 0) this.timer = setTimeout(() => this.go(), this.windowMs);
      else this.immediate = setImmediate(() => this.go());
    }
    return promise;
  }

  private go(): void {
    if (this.timer) clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = undefined;
    this.immediate = undefined;
    const batch = this.pending;
    this.pending = [];
    this.ids = new Set();
    if (batch.length === 0) return;
    this.flush(batch).catch((error: unknown) => {
      for (const w of batch) w.reject(error);
    });
  }
}

const hex = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');
const base64 = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
const keyId = (scope: string, key: string) => `${scope.length}:${scope}${key}`;

/** A finish as the batch writes it: the key, its token, the response in its stored form (inline). */
export interface GroupFinish {
  ref: KeyRef;
  status: number;
  form: StoredForm;
}

/**
 * The two batchers of one store. `claim` answers like the `claim` statement's first row;
 * `finish` answers whether the caller's token was current (true: finished; false: fenced).
 */
export class GroupCommit {
  private readonly claims: Batcher<ClaimInput, Row | undefined>;
  private readonly finishes: Batcher<GroupFinish, boolean>;
  /** False in wait mode: a finish there must notify (protocol.md K17), which the batch does not. */
  readonly batchFinishes: boolean;

  constructor(
    private readonly db: SqlExecutor,
    private readonly sql: GroupSql,
    options: Required<Pick<GroupCommitOptions, 'windowMs' | 'maxBatch'>> & Pick<GroupCommitOptions, 'onBatch'>,
    batchFinishes: boolean,
  ) {
    this.batchFinishes = batchFinishes;
    const report = options.onBatch;
    const timed = async <T>(kind: GroupBatch['kind'], size: number, run: () => Promise<T>): Promise<T> => {
      const t0 = performance.now();
      let failed = true;
      try {
        const value = await run();
        failed = false;
        return value;
      } finally {
        report?.({ kind, size, durationMs: performance.now() - t0, failed });
      }
    };
    this.claims = new Batcher(options.windowMs, options.maxBatch, async (batch) => {
      const json = JSON.stringify(
        batch.map(({ input: i }) => ({ s: i.scope, k: i.key, f: hex(i.fingerprint), l: Math.round(i.leaseMs), r: Math.round(i.retentionMs) })),
      );
      let rows: Row[];
      try {
        rows = (await timed('claim', batch.length, () => this.db.query(this.sql.groupClaim, [json]))).rows;
      } catch (error) {
        if (!rowError(error)) throw error;
        // Nothing was committed: each caller claims alone and gets its own outcome or error.
        await Promise.all(
          batch.map(({ input: i, resolve, reject }) =>
            this.db.query(this.sql.claim, [i.scope, i.key, i.fingerprint, i.leaseMs, i.retentionMs]).then((r) => resolve(r.rows[0]), reject),
          ),
        );
        return;
      }
      const byKey = new Map(rows.map((row) => [keyId(String(row.scope), String(row.key)), row]));
      for (const w of batch) w.resolve(byKey.get(w.id));
    });
    this.finishes = new Batcher(options.windowMs, options.maxBatch, async (batch) => {
      const json = JSON.stringify(
        batch.map(({ input: f }) => ({
          s: f.ref.scope,
          k: f.ref.key,
          v: f.ref.token,
          st: f.status,
          h: f.form.headers,
          b: base64(f.form.body!),
          kid: f.form.keyId,
        })),
      );
      let rows: Row[];
      try {
        rows = (await timed('finish', batch.length, () => this.db.query(this.sql.groupFinish, [json]))).rows;
      } catch (error) {
        if (!rowError(error)) throw error;
        await Promise.all(batch.map(({ input, resolve, reject }) => this.finishAlone(input).then(resolve, reject)));
        return;
      }
      const done = new Set(rows.map((row) => keyId(String(row.scope), String(row.key))));
      for (const w of batch) w.resolve(done.has(w.id));
    });
  }

  /**
   * The claim of `input` in the next batch: its `claim`-shaped row (`claimed` or `exists`),
   * or undefined when the key lost a race in the batch or is already in the open batch, in
   * which case the caller continues on the ordinary path (protocol.md K19).
   */
  async claim(input: ClaimInput): Promise<Row | undefined> {
    const joined = this.claims.add(keyId(input.scope, input.key), input);
    return joined ? await joined : undefined;
  }

  /** The fenced finish of `finish.ref` in the next batch. @returns false when fenced */
  async finish(finish: GroupFinish): Promise<boolean> {
    const joined = this.finishes.add(keyId(finish.ref.scope, finish.ref.key), finish);
    return joined ? await joined : this.finishAlone(finish);
  }

  private async finishAlone({ ref, status, form }: GroupFinish): Promise<boolean> {
    const { rows } = await this.db.query(this.sql.finish, [ref.scope, ref.key, ref.token, status, form.headers, form.body, null, form.keyId]);
    return rows.length > 0;
  }
}
