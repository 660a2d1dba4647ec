/**
 * The DynamoDB cases of issue 43 (protocol.md K53), run over each emulator by
 * test/dynamodb-store.test.ts. Time moves on the store's own clock (its `clock` option), never by
 * sleeping: a lease runs out and retention ends when the test says so.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { GetItemCommand } from '@aws-sdk/client-dynamodb';
import { idempotent } from '../../src/function/index.js';
import { KeyInProgressError } from '../../src/function/errors.js';
import type { KeyRef } from '../../src/store/types.js';
import { claimInput, claimedToken } from '../contracts/store/shared.js';
import { dynamoDbHarness } from './dynamodb-stores.js';
import type { DynamoDbEmulator } from './dynamodb.js';

/** Registers the cases; call inside a `describe`. */
export function dynamoDbCases(start: () => Promise<DynamoDbEmulator>): void {
  let emulator: DynamoDbEmulator;
  before(async () => {
    emulator = await start();
  });
  after(async () => {
    await emulator.stop();
  });

  it('runs the work once for 32 concurrent duplicates of one key; the others are in progress or replayed', async () => {
    const h = await dynamoDbHarness(emulator);
    let runs = 0;
    const charge = idempotent(
      async (_ctx, order: { id: string }) => {
        runs++;
        await new Promise((resolve) => setImmediate(resolve));
        return { charged: order.id };
      },
      { store: h.store, name: 'charges', key: (order) => order.id },
    );
    const settled = await Promise.allSettled(Array.from({ length: 32 }, () => charge({ id: 'o-1' })));
    assert.equal(runs, 1, 'one effect');
    const fulfilled = settled.filter((s) => s.status === 'fulfilled').map((s) => (s as PromiseFulfilledResult<unknown>).value);
    const rejected = settled.filter((s) => s.status === 'rejected').map((s) => (s as PromiseRejectedResult).reason as unknown);
    assert.ok(fulfilled.length >= 1);
    for (const value of fulfilled) assert.deepEqual(value, { charged: 'o-1' });
    for (const reason of rejected) assert.ok(reason instanceof KeyInProgressError, `in progress, got ${String(reason)}`);
    assert.deepEqual(await charge({ id: 'o-1' }), { charged: 'o-1' }, 'a later retry replays');
    assert.equal(runs, 1);
    await h.drop();
  });

  it('takes a key over once its lease ran out; the late writer’s conditional writes are refused', async () => {
    let now = Date.now();
    const h = await dynamoDbHarness(emulator, { clock: () => now, clockSkewMs: 500 });
    const store = h.store;
    const late: KeyRef = { scope: 'tenant-1', key: 'k', token: claimedToken(await store.claim(claimInput('k', { leaseMs: 1000 }))) };
    now += 1200; // past the lease, not yet past the skew margin
    assert.deepEqual(await store.takeOver(late, 60_000), { kind: 'lost' }, 'a lease is over for a taker only clockSkewMs after its end');
    now += 400;
    const taken = await store.takeOver(late, 60_000);
    assert.equal(taken.kind, 'taken');
    const current = { ...late, token: (taken as { token: number }).token };
    assert.ok(current.token > late.token);
    const body = new Uint8Array([1, 2, 3]);
    assert.deepEqual(await store.commit(late, () => ({ kind: 'phase', phase: 'p1', result: 'late', leaseMs: 60_000 })), { kind: 'fenced' });
    assert.deepEqual(await store.commit(late, () => ({ kind: 'finish', response: { status: 500, headers: [], body } })), { kind: 'fenced' });
    assert.deepEqual(await store.extendLease(late, 60_000), { kind: 'fenced' });
    assert.deepEqual(await store.release(late), { kind: 'fenced' });
    assert.deepEqual(await store.countFailure(late), { kind: 'fenced' });
    assert.equal((await store.commit(current, () => ({ kind: 'finish', response: { status: 201, headers: [], body } }))).kind, 'ok');
    const record = await store.get('tenant-1', 'k', 60_000);
    assert.equal(record?.response?.status, 201, 'the taker’s response, not the late writer’s');
    assert.equal(record?.token, current.token);
    await h.drop();
  });

  it('stores a response over 400 KB as chunk items and replays it byte for byte', async () => {
    const h = await dynamoDbHarness(emulator);
    const body = new Uint8Array(randomBytes(1_100_000));
    const token = claimedToken(await h.store.claim(claimInput('big')));
    const response = { status: 200, headers: [['content-type', 'application/octet-stream']] as Array<[string, string]>, body };
    assert.equal((await h.store.commit({ scope: 'tenant-1', key: 'big', token }, () => ({ kind: 'finish', response }))).kind, 'ok');
    const items = (await h.snapshot('tenant-1', 'big')) as unknown[];
    assert.ok(items.length >= 5, `a key item and its chunks, got ${items.length} items`);
    const replay = await h.store.claim(claimInput('big'));
    assert.equal(replay.kind, 'exists');
    const stored = (replay as { record: { response?: { body: Uint8Array; status: number; headers: unknown } } }).record.response!;
    assert.equal(stored.status, 200);
    assert.deepEqual(stored.headers, response.headers);
    assert.equal(Buffer.compare(Buffer.from(stored.body), Buffer.from(body)), 0, 'the same bytes');
    await h.drop();
  });

  it('never replays an item past retention, though TTL has not deleted it', async () => {
    let now = Date.now();
    const h = await dynamoDbHarness(emulator, { clock: () => now });
    const token = claimedToken(await h.store.claim(claimInput('old', { retentionMs: 60_000 })));
    const ref = { scope: 'tenant-1', key: 'old', token };
    await h.store.commit(ref, () => ({ kind: 'finish', response: { status: 201, headers: [], body: new Uint8Array([7]) } }));
    now += 60_001;
    const raw = await emulator.client.send(
      new GetItemCommand({
        TableName: (h.store as unknown as { table: string }).table,
        Key: { pk: { S: '8:tenant-1:old' }, sk: { S: 'key' } },
        ConsistentRead: true,
      }),
    );
    assert.ok(raw.Item, 'the item is still in the table (TTL deletion is lazy; emulators never delete)');
    assert.equal(await h.store.get('tenant-1', 'old', 60_000), undefined, 'get: absent');
    const claimed = await h.store.claim(claimInput('old', { retentionMs: 60_000 }));
    assert.equal(claimed.kind, 'claimed', 'a claim replaces it, nothing replayed');
    assert.ok((claimed as { token: number }).token > token);
    await h.drop();
  });
}
