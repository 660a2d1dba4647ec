/**
 * The dashboard's actions, run only after `dashboard.ts` checked the POST's Host, Origin and
 * token: `release` of a stuck key and `forget` of a finished one (protocol.md K21, K40-K42),
 * through `idem/operator`, fenced by the token the operator saw, recorded on the row as done
 * `by: 'dashboard'` and reported to the telemetry.
 */
import type { IdempotencyTelemetry } from '../engine/telemetry.js';
import { forgetKey, type OperatorOptions, type OperatorRefusal, releaseKey } from '../operator/index.js';
import type { CliStore } from './store.js';

/** The actions the dashboard offers, by their path `/api/<action>`. */
export const DASHBOARD_ACTIONS = ['release', 'forget'] as const;
export type DashboardAction = (typeof DASHBOARD_ACTIONS)[number];

/** An action's answer: HTTP status and JSON body. */
export interface ActionOutcome {
  status: number;
  body: { done: true; action: DashboardAction; scope: string; key: string; token: string; newToken: string; message: string } | { error: string };
}

/** The HTTP status of a refusal: an absent key 404, a store without actions 501, else a conflict. */
const REFUSAL_STATUS: Record<OperatorRefusal, number> = {
  absent: 404,
  unsupported: 501,
  finished: 409,
  started: 409,
  'live-lease': 409,
  'token-changed': 409,
  changed: 409,
};

/**
 * `POST /api/release` or `/api/forget` with `{ scope, key, token, reason? }`: releases a started
 * key whose lease has already ended (the dashboard never forces), or forgets a finished key,
 * only while the key's token is still `token`. Refuses (4xx, nothing changed) with the reason.
 */
export async function operatorAction(
  action: DashboardAction,
  store: CliStore,
  text: string,
  retentionMs: number,
  telemetry?: IdempotencyTelemetry,
): Promise<ActionOutcome> {
  let input: { scope?: unknown; key?: unknown; token?: unknown; reason?: unknown };
  try {
    input = JSON.parse(text) as typeof input;
  } catch {
    return { status: 400, body: { error: 'the body is not JSON' } };
  }
  const { scope, key, token, reason } = input ?? {};
  if (typeof scope !== 'string' || typeof key !== 'string' || !scope || !key) return { status: 400, body: { error: 'scope and key (strings) are required' } };
  // Any non-negative integer as digits (Redis tokens are µs clocks: 16 digits). Read as a
  // bigint: a token past 2^53 - 1 is no token a store issued (they stay below it), and Number
  // would round it onto another token, so it is refused as stale, never compared rounded.
  if (typeof token !== 'string' || !/^\d+$/.test(token)) return { status: 400, body: { error: 'token: the fencing token shown, as decimal text' } };
  if (BigInt(token) > BigInt(Number.MAX_SAFE_INTEGER)) {
    return { status: REFUSAL_STATUS['token-changed'], body: { error: `the key's token is not ${token} (tokens stay below 2^53): read it again` } };
  }
  const options: OperatorOptions = { token: Number(token), retentionMs, by: 'dashboard' };
  if (typeof reason === 'string' && reason) options.reason = reason;
  if (telemetry) options.telemetry = telemetry;
  const outcome = await (action === 'release' ? releaseKey : forgetKey)(store, scope, key, options);
  if (!outcome.done) return { status: REFUSAL_STATUS[outcome.refusal], body: { error: outcome.message } };
  return {
    status: 200,
    body: { done: true, action, scope, key, token: String(outcome.token), newToken: String(outcome.newToken), message: outcome.message },
  };
}
