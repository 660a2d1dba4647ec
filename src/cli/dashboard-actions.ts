/**
 * The dashboard's actions, run only after `dashboard.ts` checked the POST's Host, Origin and
 * token. One so far: `release` of a stuck key (protocol.md K21).
 */
import type { PostgresStore } from '../postgres/index.js';

/** An action's answer: HTTP status and JSON body. */
export interface ActionOutcome {
  status: number;
  body: { released: true; scope: string; key: string; token: string } | { error: string };
}

/**
 * `POST /api/release` with `{ scope, key, token }`: ends the lease of a started key whose lease
 * has already ended, fenced by the token the operator saw (protocol.md K21). The key keeps its
 * recovery point; its lease-end time becomes now. Refuses (409, nothing changed) a finished
 * key, a live lease, and a token that is no longer the key's.
 */
export async function releaseAction(store: PostgresStore, text: string, retentionMs: number): Promise<ActionOutcome> {
  let input: { scope?: unknown; key?: unknown; token?: unknown };
  try {
    input = JSON.parse(text) as typeof input;
  } catch {
    return { status: 400, body: { error: 'the body is not JSON' } };
  }
  const { scope, key, token } = input ?? {};
  if (typeof scope !== 'string' || typeof key !== 'string' || !scope || !key) return { status: 400, body: { error: 'scope and key (strings) are required' } };
  if (typeof token !== 'string' || !/^\d{1,15}$/.test(token)) return { status: 400, body: { error: 'token: the fencing token shown, as decimal text' } };
  const found = await store.inspect(scope, key, retentionMs);
  if (!found) return { status: 404, body: { error: 'no such key' } };
  if (found.state !== 'started') return { status: 409, body: { error: `the key is ${found.state}: nothing to release` } };
  if (found.token !== token) return { status: 409, body: { error: `the token is ${found.token} now, not ${token}: another worker took the key over; reload` } };
  if (!found.leaseExpired)
    return { status: 409, body: { error: `a worker holds the lease for ${Math.ceil(found.leaseRemainingMs / 1000)} s more: not released` } };
  // Fenced by the token (protocol.md K8): a takeover since the read makes this a no-op.
  const released = await store.release({ scope, key, token: Number(token) });
  if (released.kind === 'fenced') return { status: 409, body: { error: 'the key changed since it was read (taken over or finished): not released' } };
  return { status: 200, body: { released: true, scope, key, token } };
}
