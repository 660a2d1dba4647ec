/**
 * The takeover check of the Cloudflare stores' own tests (test/durable-object-store.test.ts,
 * test/d1-store.test.ts): a claim whose lease ran out is taken over with a higher token, and the
 * late writer's phase, heartbeat, finish and release change nothing (protocol.md K8, K9); the
 * taker's finish is what a later claim replays, byte for byte.
 */
import assert from 'node:assert/strict';
import { claimedToken, claimInput } from '../contracts/store.js';
import type { StoreHarness } from './stores.js';

const SCOPE = 'tenant-1';

/** A finished response whose body carries `n`. */
export const response = (n: number) => ({
  status: 201,
  headers: [['content-type', 'application/json']] as Array<[string, string]>,
  body: new Uint8Array([n, 0, 255]),
});

/** A phase's effect that writes through the store's `tx`, and how many of its writes took hold. */
export interface WritingEffect<Tx> {
  write(tx: Tx): Promise<unknown>;
  written(): Promise<number>;
}

/** See the module comment; `effect`: the late writer's phase also writes, and that write must not take hold. */
export async function fencesLateWriter<Tx>(h: StoreHarness<Tx>, key: string, effect?: WritingEffect<Tx>): Promise<void> {
  const store = h.store;
  const late = claimedToken(await store.claim(claimInput(key, { leaseMs: 0 })));
  const taken = await store.takeOver({ scope: SCOPE, key, token: late }, 60_000);
  assert.equal(taken.kind, 'taken');
  const token = (taken as { token: number }).token;
  assert.ok(token > late);
  const stale = { scope: SCOPE, key, token: late };
  const before = await h.snapshot(SCOPE, key);
  const phase = () => ({ kind: 'phase' as const, phase: 'p', result: 1, leaseMs: 60_000 });
  if (effect) {
    assert.deepEqual(await store.commit(stale, phase, effect.write), { kind: 'fenced' });
    assert.equal(await effect.written(), 0, "the late writer's write rolled back with its phase");
  }
  assert.deepEqual(await store.commit(stale, phase), { kind: 'fenced' });
  assert.deepEqual(await store.extendLease(stale, 60_000), { kind: 'fenced' });
  assert.deepEqual(await store.commit(stale, () => ({ kind: 'finish', response: response(1) })), { kind: 'fenced' });
  assert.deepEqual(await store.release(stale), { kind: 'fenced' });
  assert.deepEqual(await h.snapshot(SCOPE, key), before, 'the late writer changed nothing');
  if (effect) {
    assert.equal((await store.commit({ ...stale, token }, phase, effect.write)).kind, 'ok');
    assert.equal(await effect.written(), 1, "the taker's phase and its write commit together");
  }
  assert.equal((await store.commit({ ...stale, token }, () => ({ kind: 'finish', response: response(2) }))).kind, 'ok');
  const replay = await store.claim(claimInput(key));
  assert.equal(replay.kind, 'exists');
  assert.deepEqual((replay as { record: { response?: unknown } }).record.response, response(2), 'the taker answers, byte for byte');
}
