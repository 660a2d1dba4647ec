/**
 * The completer (Brandur Leach's `completer.rb`; issue 4): a background job that finds keys
 * left `started` with no worker on them (the worker crashed and its client never retried),
 * takes each over with the fencing token and drives it to completion from its recovery point
 * through the same {@link Execution} machinery as a retry: completed phases are skipped,
 * recorded `call` results reused, derived keys unchanged. So an abandoned payment does not
 * stay half-done, and the client's later retry (if any) gets the stored response.
 *
 * It needs the request: turn on `storeRequests` on the HTTP layer, which stores a snapshot
 * (method, path with query, content type, body bytes; never credentials) before the handler
 * runs. The handler must not depend on anything the snapshot lacks (credentials): it gets
 * the key's scope from `context.scope`.
 */
import { RECOVERY_POINT_START } from '../core/constants.js';
import { InvalidOptionError } from '../core/errors.js';
import type { Execution } from '../engine/execution.js';
import { hasCompletion } from '../store/capabilities.js';
import type { AbandonedKey } from '../store/types.js';
import type { IdempotencyContext } from './context.js';
import type { HttpIdempotency } from './idempotency.js';

/** Options of {@link Completer}. Durations in ms. */
export interface CompleterOptions<Tx = unknown> {
  /** The HTTP layer whose keys to complete (its engine, store, capture and completion rules). */
  http: HttpIdempotency<Tx>;
  /**
   * Runs one request for completion, as the route would: `request` is rebuilt from the
   * snapshot (URL `http://idem-completer.invalid<path>`, `Content-Type`, body), `context`
   * holds the taken-over execution. Return the response to store.
   */
  run: (request: Request, context: IdempotencyContext<Tx>) => Response | Promise<Response>;
  /**
   * Extra wait after a lease ended before a key counts as abandoned, in ms. A client retry
   * and the completer racing for one key is safe (the takeover is a compare-and-set on the
   * token; the loser gets 409 and later the stored response), so this only trades work.
   * A released lease (a thrown handler) ended when it was released, so it waits the grace too:
   * the client that saw the throw retries first (protocol.md K10).
   * @default 0
   */
  graceMs?: number;
  /** Keys per pass. @default 100 */
  batchSize?: number;
  /** Keys driven at once within a pass. @default 4 */
  concurrency?: number;
}

/** What one pass did, by key count. */
export interface CompleterReport {
  /** Abandoned keys listed. */
  found: number;
  /** Taken over and finished: the response is stored. */
  completed: number;
  /** Taken over with no phase committed and no request stored, then deleted (see {@link Completer}). */
  discarded: number;
  /** Taken over, but the work failed again (lease released, recovery point kept) or the lease was lost. */
  failed: number;
  /** Another worker (a retry, another completer) took the key first. */
  lost: number;
  /** Work committed but no request stored (the completer was off when it ran): left to a client retry. */
  skipped: number;
}

/**
 * Finds and finishes abandoned keys. Run it on an interval ({@link start}) in every app
 * process, or once from a job ({@link runOnce}); any number may run at once.
 *
 * A key with no phase committed and no stored request is **discarded** (deleted): with
 * `storeRequests` on, the snapshot is written before the handler runs, so no snapshot means
 * the handler never ran and nothing happened; the client's retry starts fresh. A key with no
 * phase committed but a stored request is **run from the start** instead: its handler may
 * have called a downstream system inside `call` before crashing, and only the same claim (so
 * the same derived key) lets that system deduplicate the repeat; a discard would give the
 * retry a new claim id and a new derived key.
 *
 * @throws {InvalidOptionError} when the store cannot list abandoned keys.
 */
export class Completer<Tx = unknown> {
  private readonly http: HttpIdempotency<Tx>;
  private readonly run: CompleterOptions<Tx>['run'];
  private readonly graceMs: number;
  private readonly batchSize: number;
  private readonly concurrency: number;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private running: Promise<CompleterReport> | undefined;
  private stopped = true;

  constructor(options: CompleterOptions<Tx>) {
    this.http = options.http;
    this.run = options.run;
    this.graceMs = options.graceMs ?? 0;
    this.batchSize = options.batchSize ?? 100;
    this.concurrency = options.concurrency ?? 4;
    const store = this.http.engine.store;
    if (!hasCompletion(store)) {
      throw new InvalidOptionError('idem: the completer needs a store that declares completion (saveRequest, listAbandoned), e.g. PostgresStore');
    }
    if (!(this.graceMs >= 0) || !(this.batchSize >= 1) || !(this.concurrency >= 1)) {
      throw new InvalidOptionError('idem: completer graceMs must be >= 0, batchSize and concurrency >= 1');
    }
  }

  /**
   * One pass: lists up to `batchSize` abandoned keys and drives each. A pass already running
   * is joined, not doubled.
   *
   * @throws whatever the store throws while listing (it is unreachable)
   */
  runOnce(): Promise<CompleterReport> {
    this.running ??= this.pass().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  /**
   * Runs a pass every `intervalMs` ms (timer unref'd) until {@link stop}. Errors of a pass
   * go to `onError` (default: one console line) and the next pass runs as planned.
   */
  start(intervalMs: number, onError: (error: unknown) => void = (e) => console.error('idem completer:', (e as Error)?.message ?? e)): void {
    if (!(intervalMs > 0)) throw new InvalidOptionError('idem: completer intervalMs must be > 0');
    if (!this.stopped) return; // already running: a second loop would outlive stop()
    this.stopped = false;
    const tick = () => {
      this.runOnce()
        .catch(onError)
        .finally(() => {
          if (this.stopped) return;
          this.timer = setTimeout(tick, intervalMs);
          this.timer.unref?.();
        });
    };
    this.timer = setTimeout(tick, intervalMs);
    this.timer.unref?.();
  }

  /** Stops the interval and waits for a pass in flight. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running?.catch(() => undefined);
  }

  private async pass(): Promise<CompleterReport> {
    const engine = this.http.engine;
    const found = await engine.store.listAbandoned!({ limit: this.batchSize, graceMs: this.graceMs, retentionMs: engine.retentionMs });
    const report: CompleterReport = { found: found.length, completed: 0, discarded: 0, failed: 0, lost: 0, skipped: 0 };
    const queue = [...found];
    const worker = async () => {
      for (let item = queue.shift(); item; item = queue.shift()) report[await this.drive(item)]++;
    };
    await Promise.all(Array.from({ length: Math.min(this.concurrency, queue.length) }, worker));
    return report;
  }

  private async drive({ record, request }: AbandonedKey): Promise<Exclude<keyof CompleterReport, 'found'>> {
    const nothingCommitted = record.recoveryPoint === RECOVERY_POINT_START && Object.keys(record.phaseResults).length === 0;
    if (!request && !nothingCommitted) return 'skipped';
    const store = this.http.engine.store;
    if (!request && store.discardAbandoned) {
      // Decided on the row as it is now, not as listed (see PostgresStore.discardAbandoned).
      try {
        const discarded = await store.discardAbandoned({ scope: record.scope, key: record.key, token: record.token });
        return discarded.kind === 'ok' ? 'discarded' : 'lost';
      } catch {
        return 'failed';
      }
    }
    let execution: Execution<Tx> | undefined;
    try {
      execution = await this.http.engine.takeOver(record);
    } catch {
      return 'failed'; // store unreachable: the key stays abandoned for the next pass
    }
    if (!execution) return 'lost';
    if (!request) {
      const outcome = await execution.discard().catch(() => 'failed' as const);
      return outcome === 'deleted' ? 'discarded' : 'failed';
    }
    const headers = new Headers();
    if (request.contentType) headers.set('content-type', request.contentType);
    const rebuilt = new Request(new URL(request.url, 'http://idem-completer.invalid'), {
      method: request.method,
      headers,
      body: request.body && request.method !== 'GET' && request.method !== 'HEAD' ? request.body : null,
    });
    await this.http.resume(execution, rebuilt, this.run);
    return execution.status === 'done' ? 'completed' : 'failed';
  }
}
