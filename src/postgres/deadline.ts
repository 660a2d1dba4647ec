/**
 * The deadline on each of idem's statements (`storeTimeoutMs`, protocol.md H17) as the pool and
 * driver executors phrase it, over the deadline every store shares (src/store/deadline.ts).
 */
import { StoreTimeoutError, withDeadline } from '../store/deadline.js';

export { StoreTimeoutError };

/** True when `ms` is a deadline (`0` or `Infinity`: none). */
export function hasDeadline(ms: number): boolean {
  return ms > 0 && Number.isFinite(ms);
}

/** The statement's first two words, for an error message (never its parameters). */
export function describeStatement(text: string): string {
  return `the statement ${text.trim().split(/\s+/, 2).join(' ')}`;
}

/** The message of a wait that missed its deadline. */
function lateMessage(what: string | (() => string), ms: number): string {
  return `idem/postgres: ${typeof what === 'function' ? what() : what} took longer than storeTimeoutMs (${ms} ms)`;
}

/**
 * Settles like `promise`, or rejects with a {@link StoreTimeoutError} after `ms` and calls
 * `onTimeout`. `what` (a function: called only then) names the wait in the error.
 */
export function deadline<T>(promise: Promise<T>, ms: number, what: string | (() => string), onTimeout: () => void): Promise<T> {
  return withDeadline(promise, ms, () => lateMessage(what, ms), onTimeout);
}

/**
 * The deadline of one transaction of idem's (protocol.md H17), as both executors keep it: each
 * of its waits (for a connection and BEGIN, for each of idem's statements, for the COMMIT)
 * gets `ms` of its own, and the first wait that misses it is the transaction's outcome
 * ({@link TransactionDeadline.settle}), even while the late wait itself still runs.
 */
export interface TransactionDeadline {
  /** True once a wait missed the deadline. */
  readonly missed: boolean;
  /**
   * `promise` under the deadline; past it, `onTimeout` runs (e.g. destroy the connection) and
   * the transaction's outcome is the {@link StoreTimeoutError}.
   */
  wait<T>(promise: Promise<T>, what: string | (() => string), onTimeout?: () => void): Promise<T>;
  /**
   * A wait that the returned function ends (e.g. from the moment BEGIN is sent until the
   * transaction's body starts). That function throws the {@link StoreTimeoutError} when the
   * wait had already missed the deadline, so a late body runs none of its work.
   */
  start(what: string): () => void;
  /**
   * Settles like `run`, or rejects with the first missed wait's error, whichever comes first;
   * when `run` settles, a wait still running (the COMMIT's) is ended.
   */
  settle<T>(run: Promise<T>): Promise<T>;
}

/** A {@link TransactionDeadline} of `ms` per wait (`0` or `Infinity`: no deadline, nothing ever missed). */
export function transactionDeadline(ms: number): TransactionDeadline {
  let missed: StoreTimeoutError | undefined;
  let abort: (error: Error) => void = () => undefined;
  const aborted = new Promise<never>((_, reject) => (abort = reject));
  aborted.catch(() => undefined); // only `settle` reports it
  const open = new Set<() => void>();
  const wait = <T>(promise: Promise<T>, what: string | (() => string), onTimeout?: () => void): Promise<T> =>
    deadline(promise, ms, what, () => {
      onTimeout?.();
      missed ??= new StoreTimeoutError(lateMessage(what, ms));
      abort(missed);
    });
  return {
    get missed() {
      return missed !== undefined;
    },
    wait,
    start(what) {
      let end: () => void = () => undefined;
      const ended = new Promise<void>((resolve) => (end = resolve));
      const stop = () => {
        open.delete(stop);
        end();
        if (missed) throw missed;
      };
      open.add(stop);
      void wait(ended, what).catch(() => undefined);
      return stop;
    },
    settle<T>(run: Promise<T>): Promise<T> {
      run.catch(() => undefined); // once a wait was missed, the late outcome of `run` is expected
      const finish = () => {
        for (const stop of open) {
          open.delete(stop);
          try {
            stop();
          } catch {
            // the transaction's outcome is already decided
          }
        }
      };
      return Promise.race([run, aborted]).finally(finish);
    },
  };
}
