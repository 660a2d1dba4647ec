/**
 * RedisStore's `durability` option: WAIT after the claim and after finish. On a primary with
 * a replica (started on loopback) claims are acknowledged; on a server whose replica is gone
 * (or that has none) the claim fails (the engine answers 503) and is discarded, and a finish
 * throws: never reported as a success.
 */
import { redisSkip } from './helpers/redis.js';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createClient } from '@redis/client';
import { NotReplicatedError, RedisStore } from '../src/redis/index.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { StoreUnavailableError } from '../src/core/errors.js';
import { randomPrefix, startReplicaPair, type ReplicaPair } from './helpers/redis.js';

const fp = new Uint8Array(32).fill(1);
const claimInput = (key: string) => ({ scope: 's', key, fingerprint: fp, leaseMs: 60_000, retentionMs: 600_000 });

describe('RedisStore durability (WAIT)', { timeout: 120_000, skip: redisSkip }, () => {
  let pair: ReplicaPair;
  let client: ReturnType<typeof createClient>;
  before(async () => {
    pair = await startReplicaPair();
    client = createClient({ url: `redis://127.0.0.1:${pair.primaryPort}` });
    client.on('error', () => undefined);
    await client.connect();
  });
  after(async () => {
    client?.destroy();
    await pair?.stop();
  });

  it('acknowledges a claim and a finish once the replica has them', async () => {
    const store = new RedisStore({ client, prefix: randomPrefix(), durability: { replicas: 1, timeoutMs: 5000 } });
    const claimed = await store.claim(claimInput('k'));
    assert.equal(claimed.kind, 'claimed');
    const token = (claimed as { token: number }).token;
    const replica = createClient({ url: `redis://127.0.0.1:${pair.replicaPort}` });
    await replica.connect();
    try {
      const done = await store.commit({ scope: 's', key: 'k', token }, () => ({
        kind: 'finish',
        response: { status: 201, headers: [], body: new Uint8Array([1]) },
      }));
      assert.equal(done.kind, 'ok');
      const keys = (await replica.sendCommand(['KEYS', '*'])) as string[];
      assert.ok(
        keys.some((k) => k.endsWith(':{s:k}')),
        `the replica holds the key: ${keys.join(', ')}`,
      );
    } finally {
      replica.destroy();
    }
  });

  it('asking for more replicas than answer: the claim fails (503 from the engine) and leaves no key; a finish throws', async () => {
    const prefix = randomPrefix();
    const strict = new RedisStore({ client, prefix, durability: { replicas: 2, timeoutMs: 100 } });
    await assert.rejects(strict.claim(claimInput('k')), (error) => error instanceof NotReplicatedError && error.acknowledged === 1);
    const plain = new RedisStore({ client, prefix });
    assert.equal(await plain.get('s', 'k', 600_000), undefined, 'the unreplicated claim was discarded');

    const engine = new IdempotencyEngine({ store: strict });
    await assert.rejects(engine.begin({ scope: 's', key: 'k2', fingerprint: fp }), StoreUnavailableError);

    const claimed = await plain.claim(claimInput('k3'));
    const token = (claimed as { token: number }).token;
    await assert.rejects(
      strict.commit({ scope: 's', key: 'k3', token }, () => ({ kind: 'finish', response: { status: 201, headers: [], body: new Uint8Array() } })),
      NotReplicatedError,
    );
  });

  it("Valkey GLIDE: a WAIT longer than GLIDE's own request timeout (250 ms by default) still answers with the replicas that acknowledged", async () => {
    const { GlideClient } = await import('@valkey/valkey-glide');
    const glide = await GlideClient.createClient({ addresses: [{ host: '127.0.0.1', port: pair.primaryPort }] });
    try {
      const prefix = randomPrefix();
      const ok = new RedisStore({ client: glide, prefix, durability: { replicas: 1, timeoutMs: 5000 } });
      assert.equal((await ok.claim(claimInput('g1'))).kind, 'claimed');
      const strict = new RedisStore({ client: glide, prefix, durability: { replicas: 2, timeoutMs: 1000 } });
      await assert.rejects(strict.claim(claimInput('g2')), (error) => error instanceof NotReplicatedError && error.acknowledged === 1);
      assert.equal(await ok.get('s', 'g2', 600_000), undefined, 'the unreplicated claim was discarded');
    } finally {
      glide.close();
    }
  });
});
