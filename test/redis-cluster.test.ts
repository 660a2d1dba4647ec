/**
 * RedisStore on a real 3-master Redis Cluster started on random loopback ports (see
 * test/helpers/redis.ts): the store contract through node-redis, ioredis and Valkey GLIDE cluster clients,
 * then a resharding of live slots (redis-cli --cluster reshard, MOVED / ASK / TRYAGAIN on the
 * way) while claims run: no claim lost or doubled.
 */
import { redisSkip } from './helpers/redis.js';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { redisStoreSuite } from './helpers/redis-suite.js';
import { clusterClients, glideCluster, randomPrefix, startCluster, type TestCluster, type TestClient } from './helpers/redis.js';
import { RedisStore } from '../src/redis/index.js';
import type { ClaimResult } from '../src/store/types.js';

describe('Redis Cluster (3 masters on loopback)', { timeout: 600_000, skip: redisSkip }, () => {
  let cluster: TestCluster;
  before(async () => {
    cluster = await startCluster();
  });
  after(async () => {
    await cluster?.stop();
  });

  const clients = () => [...clusterClients(cluster), glideCluster(cluster)];
  for (const name of ['node-redis cluster', 'ioredis cluster', 'Valkey GLIDE cluster']) {
    redisStoreSuite(
      name,
      () =>
        clients()
          .find((c) => c.name === name)!
          .open(),
      { ownServer: true },
    );
  }

  for (const name of ['node-redis cluster', 'ioredis cluster', 'Valkey GLIDE cluster']) {
    it(`${name}: resharding slots with live keys while claims run loses and doubles no claim`, async () => {
      const t: TestClient = await clients()
        .find((c) => c.name === name)!
        .open();
      try {
        const store = new RedisStore({ client: t.client, prefix: randomPrefix() });
        const body = new Uint8Array([1, 2, 3]);
        const claimsOf = new Map<string, number>();
        const outcomes: ClaimResult[] = [];
        let stop = false;
        let n = 0;
        // Workers: each new key claimed twice at once (exactly one may win), the winner finishes,
        // then a retry must replay. Runs until the resharding ends.
        const worker = async () => {
          while (!stop) {
            const key = `k${n++}`;
            const [a, b] = await Promise.all(
              [0, 1].map(() => store.claim({ scope: 's', key, fingerprint: new Uint8Array(32).fill(1), leaseMs: 60_000, retentionMs: 600_000 })),
            );
            outcomes.push(a!, b!);
            const won = [a!, b!].filter((r) => r.kind === 'claimed') as Array<{ token: number }>;
            claimsOf.set(key, won.length);
            if (won.length === 1) {
              const fin = await store.commit({ scope: 's', key, token: won[0]!.token }, () => ({
                kind: 'finish',
                response: { status: 201, headers: [], body },
              }));
              assert.equal(fin.kind, 'ok');
            }
          }
        };
        const workers = Array.from({ length: 8 }, worker);
        // Let keys land in every slot range first, then move 3000 slots between two masters.
        while (n < 400) await new Promise((r) => setTimeout(r, 20));
        const [p0, p1] = cluster.ports;
        await cluster.reshard(p0!, p1!, 3000);
        while (n < 800) await new Promise((r) => setTimeout(r, 20)); // claims after the move too
        stop = true;
        await Promise.all(workers);
        assert.ok(claimsOf.size >= 800, `${claimsOf.size} keys`);
        const doubled = [...claimsOf].filter(([, c]) => c > 1);
        const lost = [...claimsOf].filter(([, c]) => c === 0);
        assert.deepEqual(doubled, [], 'no key claimed twice');
        assert.deepEqual(lost, [], 'every key claimed once');
        // Every key is now finished and replays, wherever its slot lives now.
        for (const key of claimsOf.keys()) {
          const again = await store.claim({ scope: 's', key, fingerprint: new Uint8Array(32).fill(1), leaseMs: 60_000, retentionMs: 600_000 });
          assert.equal(again.kind, 'exists', key);
          assert.deepEqual((again as { record: { response?: { body: Uint8Array } } }).record.response?.body, body, key);
        }
        // Move the slots back for the next client's run.
        await cluster.reshard(p1!, p0!, 3000);
      } finally {
        await t.close();
      }
    });
  }
});
