/**
 * `idem/operator`: an operator frees one stuck key now (`releaseKey`) or makes a finished key
 * run again (`forgetKey`), on any store that declares the operator capability (PostgreSQL,
 * PGlite, MySQL, Redis, memory).
 * The `idem release` / `idem forget` commands and the dashboard's actions call these. Each
 * answers what it did, or why it refused, in one sentence; each is fenced by the token read
 * (protocol.md K40-K42), recorded on the key's row and reported to `telemetry`.
 *
 * @example
 * ```ts
 * import { forgetKey, releaseKey } from 'idem/operator';
 * const outcome = await releaseKey(store, scope, key, { by: 'alice', reason: 'INC-42' });
 * console.log(outcome.message);
 * ```
 */
import { DEFAULT_RETENTION_MS, KeyState } from '../core/constants.js';
import type { IdempotencyTelemetry, OperatorEvent } from '../engine/telemetry.js';
import { hasOperator } from '../store/capabilities.js';
import type { IdempotencyStore, KeyRecord } from '../store/types.js';

export type { OperatorEvent } from '../engine/telemetry.js';

/** Options of {@link releaseKey} and {@link forgetKey}. */
export interface OperatorOptions {
  /** Who acts (a user name, `dashboard`), recorded in the note. */
  by?: string;
  /** Why (a ticket, a sentence), recorded in the note; cut at 200 characters. */
  reason?: string;
  /** The token the operator saw (the dashboard's): refused when the key's token differs. Default: the one read now. */
  token?: number;
  /** The engine's retention: a key past it counts as absent (protocol.md K6). @default 86_400_000 */
  retentionMs?: number;
  /** `releaseKey` only: also end a valid lease, fencing its holder (protocol.md K41). */
  force?: boolean;
  /** Reports each action, done or refused (`idem/otel`: the span `idem.operator`). */
  telemetry?: IdempotencyTelemetry;
}

/** Why an action was refused. */
export type OperatorRefusal = 'absent' | 'finished' | 'started' | 'live-lease' | 'token-changed' | 'changed' | 'unsupported';

/** What an action did, or why it did nothing; `message` says it in one sentence. */
export type OperatorOutcome =
  | { done: true; action: 'release' | 'forget'; scope: string; key: string; token: number; newToken: number; note: string; message: string }
  | { done: false; action: 'release' | 'forget'; scope: string; key: string; refusal: OperatorRefusal; message: string };

/**
 * Frees a `started` key now (protocol.md K41): its lease ends, it is marked released, and its
 * token advances, so the next request (or a completer) takes it over at once and resumes after
 * its last committed phase. A valid lease (a worker on it) is refused unless `force`; forced,
 * the worker is fenced at its next write (its uncommitted effects roll back, K8).
 */
export async function releaseKey(store: IdempotencyStore<unknown>, scope: string, key: string, options: OperatorOptions = {}): Promise<OperatorOutcome> {
  return report(await decideAndWrite(store, 'release', scope, key, options), options);
}

/**
 * Makes a `done` key run again (protocol.md K42): its stored response is dropped and the row
 * becomes a released claim at `start` under a new token and claim id, so the next request with
 * the same key and body runs the handler from the start (new derived keys, K11). A `started`
 * key is refused (release it instead).
 */
export async function forgetKey(store: IdempotencyStore<unknown>, scope: string, key: string, options: OperatorOptions = {}): Promise<OperatorOutcome> {
  return report(await decideAndWrite(store, 'forget', scope, key, options), options);
}

/** Reports `outcome` to the telemetry (protocol.md K40) and returns it. */
function report(outcome: OperatorOutcome, options: OperatorOptions): OperatorOutcome {
  options.telemetry?.operator?.(toEvent(outcome, options));
  return outcome;
}

async function decideAndWrite(
  store: IdempotencyStore<unknown>,
  action: 'release' | 'forget',
  scope: string,
  key: string,
  options: OperatorOptions,
): Promise<OperatorOutcome> {
  const refuse = (refusal: OperatorRefusal, message: string): OperatorOutcome => ({ done: false, action, scope, key, refusal, message });
  if (!hasOperator(store))
    return refuse('unsupported', `this store does not declare the operator capability: nothing ${action === 'release' ? 'released' : 'forgotten'}`);
  const record = await store.get(scope, key, options.retentionMs ?? DEFAULT_RETENTION_MS);
  if (!record) return refuse('absent', 'no such key within retention (never claimed, discarded, forgotten and rerun, or past retention): nothing to do');
  if (options.token !== undefined && record.token !== options.token)
    return refuse(
      'token-changed',
      `the token is ${record.token} now, not ${options.token}: another worker took the key over or it finished since; read it again`,
    );
  const force = action === 'release' && options.force === true;
  if (action === 'release') {
    if (record.state === KeyState.Done) return refuse('finished', 'the key is finished: nothing to release (to make it run again, forget it)');
    if (!record.leaseExpired && !force)
      return refuse(
        'live-lease',
        `a worker holds the lease for ${Math.ceil(record.leaseRemainingMs / 1000)} s more (token ${record.token}): not released; wait for it to end, or force it to fence that worker`,
      );
  } else if (record.state !== KeyState.Done) {
    return refuse(
      'started',
      `the key is started (recovery point ${record.recoveryPoint}), not finished: only a finished key is forgotten (a stuck one is released)`,
    );
  }
  const note = noteOf(action, record, options, force);
  const written = await store.operate({ action, ref: { scope, key, token: record.token }, force, note });
  if (written.kind === 'fenced')
    return refuse('changed', 'the key changed since it was read (taken over, renewed, finished or replaced): nothing changed; read it again');
  const newToken = written.value.token;
  const message =
    action === 'forget'
      ? `forgotten: the stored response (status ${record.response?.status ?? '?'}) is dropped; token ${record.token} -> ${newToken}; the next request with this key and the same body runs again from the start (another body still gets 422)`
      : `released: the lease ended now; token ${record.token} -> ${newToken}; the next request with this key takes it over and resumes after ${record.recoveryPoint}` +
        (!record.leaseExpired ? `; the worker that held it (${Math.ceil(record.leaseRemainingMs / 1000)} s left) is fenced at its next write` : '');
  return { done: true, action, scope, key, token: record.token, newToken, note, message };
}

/** The JSON note the row records (protocol.md K40), at most 1024 characters. */
function noteOf(action: 'release' | 'forget', record: KeyRecord, options: OperatorOptions, force: boolean): string {
  const note: Record<string, unknown> = { action, at: new Date().toISOString(), token: record.token };
  if (force) note.force = true;
  if (action === 'release' && !record.leaseExpired) note.leaseRemainingMs = Math.round(record.leaseRemainingMs);
  if (action === 'forget' && record.response) note.status = record.response.status;
  if (options.by) note.by = options.by.slice(0, 100);
  if (options.reason) note.reason = options.reason.slice(0, 200);
  return JSON.stringify(note);
}

function toEvent(outcome: OperatorOutcome, options: OperatorOptions): OperatorEvent {
  const event: OperatorEvent = { action: outcome.action, scope: outcome.scope, key: outcome.key, done: outcome.done, force: options.force === true };
  if (outcome.done) {
    event.token = outcome.token;
    event.newToken = outcome.newToken;
  } else event.refusal = outcome.refusal;
  if (options.by) event.by = options.by;
  if (options.reason) event.reason = options.reason;
  return event;
}
