/**
 * RedisStore on the machine's Redis (REDIS_URL, default 127.0.0.1:6379), through node-redis,
 * ioredis and Valkey GLIDE, each test under a random key prefix. The Cluster runs are in
 * test/redis-cluster.test.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { redisStoreSuite } from './helpers/redis-suite.js';
import { glideSingle, randomPrefix, REDIS_URL, redisSkip, singleClients } from './helpers/redis.js';
import { hashKey, tokenKey } from '../src/redis/keys.js';
import { RedisStore } from '../src/redis/index.js';
import { InvalidOptionError } from '../src/core/errors.js';

for (const c of [...singleClients, glideSingle]) redisStoreSuite(c.name, () => c.open(), { ownServer: false });

describe('RedisStore options', () => {
  it('refuses a missing or unknown client, a prefix with braces and a bad durability', () => {
    assert.throws(() => new RedisStore({} as never), InvalidOptionError);
    assert.throws(() => new RedisStore({ client: {} as never }), InvalidOptionError);
    const client = { sendCommand: async () => null };
    assert.throws(() => new RedisStore({ client, prefix: 'a{b' }), InvalidOptionError);
    assert.throws(() => new RedisStore({ client, durability: { replicas: 0 } }), InvalidOptionError);
    assert.throws(() => new RedisStore({ client, durability: { replicas: 1, timeoutMs: -1 } }), InvalidOptionError);
  });
});

describe('RedisStore on Valkey GLIDE: the client as the application made it', { skip: redisSkip }, () => {
  it('a GlideClient decoding to Buffers by default (defaultDecoder: Decoder.Bytes): claims, fences and replays byte for byte all the same', async () => {
    const { Decoder, GlideClient } = await import('@valkey/valkey-glide');
    const url = new URL(REDIS_URL);
    const client = await GlideClient.createClient({ addresses: [{ host: url.hostname, port: Number(url.port || 6379) }], defaultDecoder: Decoder.Bytes });
    const prefix = randomPrefix();
    try {
      const store = new RedisStore({ client, prefix, replayFastPath: true });
      const input = { scope: 's', key: 'k', fingerprint: new Uint8Array(32).fill(7), leaseMs: 60_000, retentionMs: 60_000 };
      const claimed = await store.claim(input);
      assert.equal(claimed.kind, 'claimed');
      const token = (claimed as { token: number }).token;
      const response = { status: 201, headers: [['x-a', '1']] as Array<[string, string]>, body: new Uint8Array([0, 255, 1, 128]) };
      assert.deepEqual(await store.release({ scope: 's', key: 'k', token: token + 1 }), { kind: 'fenced' });
      assert.equal((await store.commit({ scope: 's', key: 'k', token }, () => ({ kind: 'finish', response }))).kind, 'ok');
      for (let i = 0; i < 2; i++) {
        const again = await store.claim(input); // the first by the replay fast path's HGETALL
        assert.equal(again.kind, 'exists');
        assert.deepEqual((again as { record: { response?: unknown } }).record.response, response);
      }
      // A script's string reply: 'deleted' (a discarded key with no phase), not its bytes.
      const other = await store.claim({ ...input, key: 'k2' });
      assert.deepEqual(await store.discard({ scope: 's', key: 'k2', token: (other as { token: number }).token }), { kind: 'ok', value: 'deleted' });
      assert.equal(await store.get('s', 'k2', 60_000), undefined);
    } finally {
      for (const key of ['k', 'k2']) {
        const h = hashKey(prefix, 's', key);
        await client.customCommand(['DEL', h, tokenKey(h)]);
      }
      client.close();
    }
  });
});
