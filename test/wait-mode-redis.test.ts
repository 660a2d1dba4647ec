/**
 * Wait mode on Redis where the server or the network fails it (protocol.md K24, K30): a server
 * without sharded pub/sub (a Redis before 7, here a Redis 7 whose SSUBSCRIBE and SPUBLISH are
 * renamed away: the same "unknown command" answer), and a subscriber that opens during an
 * outage. Real redis-servers of the test's own; nothing is mocked.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { RedisStore } from '../src/redis/index.js';
import { deferred } from './helpers/http.js';
import { randomPrefix } from './helpers/redis.js';
import { type OwnRedis, startOwnRedis } from './helpers/redis-server.js';
import { exitOf, spawnTs } from './helpers/process.js';
import { needs } from './helpers/services.js';
import { sleep } from './helpers/wait.js';

const fp = (text: string) => createHash('sha256').update(text).digest();
const body = (text: string) => new TextEncoder().encode(text);
const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

/** A node-redis or ioredis client on `port`. */
async function open(driver: string, port: number) {
  if (driver === 'node-redis') {
    const { createClient } = await import('@redis/client');
    const client = createClient({ url: `redis://127.0.0.1:${port}` });
    await client.connect();
    return { client, raw: (args: string[]) => client.sendCommand(args), close: () => void client.destroy() };
  }
  const { Redis } = await import('ioredis');
  const client = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
  return { client, raw: (args: string[]) => client.call(args[0]!, ...args.slice(1)), close: () => void client.disconnect() };
}

describe('wait mode on a Redis without sharded pub/sub (before 7): waiters read at their deadline, never a 503 (protocol.md K24)', {
  skip: needs('REDIS_URL'),
}, () => {
  let own: OwnRedis;
  before(async () => {
    own = await startOwnRedis(['--rename-command', 'SSUBSCRIBE', '', '--rename-command', 'SPUBLISH', '']);
  });
  after(async () => own?.stop());

  for (const driver of ['node-redis', 'ioredis']) {
    test(`${driver}: the 409 at the wait's end, a finish replayed at the wait's end, one warning, no subscriber left open`, async () => {
      const t = await open(driver, own.port);
      const warnings: Error[] = [];
      const onWarning = (w: Error) => {
        if ((w as { code?: string }).code === 'IDEM_REDIS_NO_SHARDED_PUBSUB') warnings.push(w);
      };
      process.on('warning', onWarning);
      try {
        const store = new RedisStore({ client: t.client, prefix: randomPrefix(), storeTimeoutMs: 2000 });
        let subscribed = deferred();
        const subscribe = store.subscribe.bind(store);
        store.subscribe = async (scope, key) => {
          const changes = await subscribe(scope, key);
          subscribed.resolve();
          return changes;
        };
        const eng = new IdempotencyEngine({ store, inProgress: { wait: 400 }, leaseMs: 30_000, heartbeatMs: 0 });
        const first = await eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') });
        assert.equal(first.kind, 'execute');
        // Nothing can wake it: the duplicate reads once more at its wait's end, then the 409 (K17 4).
        const started = performance.now();
        const dup = await eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') });
        assert.equal(dup.kind, 'in-progress');
        assert.ok(dup.kind === 'in-progress' && dup.retryAfterMs > 0);
        assert.ok(performance.now() - started >= 390, 'it waited for its whole wait');
        // A finish during a wait is found by that read: the replay (at the wait's end, or at a
        // spurious wake-up, which the contract allows).
        subscribed = deferred();
        const waiting = eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') });
        await subscribed.promise;
        if (first.kind === 'execute') await first.execution.finish(async () => ({ status: 200, headers: [], body: body('done') }));
        const got = await waiting;
        assert.equal(got.kind === 'replay' && text(got.response.body), 'done');
        // Said once per store, however many waits.
        await new Promise((resolve) => setImmediate(resolve));
        assert.equal(warnings.length, 1, 'one warning');
        assert.match(warnings[0]!.message, /no SSUBSCRIBE/);
        // The refused subscriber was closed: no pub/sub connection of this store is left.
        for (let i = 0; ; i++) {
          const list = String(await t.raw(['CLIENT', 'LIST']));
          if (list.split('\n').filter((line) => line.trim() !== '').length === 1) break;
          assert.ok(i < 400, `only the store's own connection stays:\n${list}`);
          await sleep(25);
        }
      } finally {
        process.off('warning', onWarning);
        t.close();
      }
    });
  }
});

describe('wait mode on Redis: a subscriber that opens during an outage is closed when its waiter leaves', { skip: needs('REDIS_URL') }, () => {
  for (const driver of ['node-redis', 'ioredis']) {
    test(`${driver}: the process exits by itself after its client is closed`, async () => {
      const port = new URL(process.env.REDIS_URL!).port || '6379';
      const child = spawnTs(fileURLToPath(new URL('./helpers/wait-outage-process.ts', import.meta.url)), {}, [driver, port]);
      await child.waitFor(/closed/);
      // A subscriber left reconnecting keeps the process alive for good; the ceiling only ends the test.
      const exit = await exitOf(child, 60_000);
      assert.deepEqual(exit, { code: 0, signal: null }, child.output());
    });
  }
});
