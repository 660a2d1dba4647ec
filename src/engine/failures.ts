/**
 * The one failure rule of every surface (protocol.md K5): which failed attempts count toward
 * `maxAttempts`. A failure the same request would meet again counts: a handler bug, data the
 * database refuses, a response idem refuses to record (`retryable: false` on an idem error). A
 * failure a later attempt can outgrow does not: the store unreachable or past its deadline, a
 * dropped connection, a serialization conflict, a lost lease (`retryable: true` on an idem
 * error), since a database outage must never fail payments for good. An application marks its
 * own outage errors (a payment provider down) with `transient: true`.
 */
import { IdempotencyError } from '../core/errors.js';

/** SQLSTATE classes and codes that say "try again": connection (08), resources (53), operator intervention (57), serialization (40001) and deadlock (40P01). */
const TRANSIENT_SQLSTATE = /^(08|53|57)|^40001$|^40P01$/;
/** Node's network error codes, and mysql2's for a lock wait that timed out (MySQL's SQLSTATE there is the generic HY000). */
const TRANSIENT_NODE = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ER_LOCK_WAIT_TIMEOUT']);

/**
 * True when `error` (or an error in its `cause` chain) is a failure of the infrastructure rather
 * than of the request: it does not count toward `maxAttempts`.
 */
export function isTransientFailure(error: unknown): boolean {
  for (let e = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    // idem's own errors say at the throw site whether a retry can succeed: a lease lost or the
    // store unavailable is transient; a response idem refuses to record is met again.
    if (e instanceof IdempotencyError) return e.retryable;
    if ((e as { transient?: unknown }).transient === true) return true; // the app says so (a provider outage)
    if (e.name === 'TimeoutError' || e.name === 'AbortError') return true;
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && (TRANSIENT_NODE.has(code) || (code.length === 5 && TRANSIENT_SQLSTATE.test(code)))) return true;
    // mysql2 (MySQL, MariaDB): the SQLSTATE is `sqlState` (its `code` is a name, ER_LOCK_DEADLOCK),
    // and an error that ended the connection (lost, cut, closed) is marked `fatal`.
    const sqlState = (e as { sqlState?: unknown }).sqlState;
    if (typeof sqlState === 'string' && TRANSIENT_SQLSTATE.test(sqlState)) return true;
    if ((e as { fatal?: unknown }).fatal === true) return true;
    // node-postgres reports a connection that died mid-query without a code.
    if (/Connection terminated|Client has encountered a connection error|timeout exceeded when trying to connect/i.test(e.message)) return true;
  }
  return false;
}

/** True when `error` counts toward `maxAttempts`: the same request would meet it again (the complement of {@link isTransientFailure}). */
export function countsAsFailure(error: unknown): boolean {
  return !isTransientFailure(error);
}
