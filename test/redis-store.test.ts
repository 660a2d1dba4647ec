/**
 * RedisStore on the machine's Redis (REDIS_URL, default 127.0.0.1:6379), through node-redis,
 * ioredis and Valkey GLIDE, each test under a random key prefix. The Cluster runs are in
 * test/redis-cluster.test.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { redisStoreSuite } from './helpers/redis-suite.js';
import { glideSingle, singleClients } from './helpers/redis.js';
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
