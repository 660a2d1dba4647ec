/**
 * A process whose only waiter subscribes while Redis is unreachable (test/wait-mode-redis.test.ts):
 * its subscriber connection never comes up; the subscription times out (503), the waiter leaves,
 * the application closes its client. The process must then exit by itself: nothing of idem's
 * may stay open or keep reconnecting. Args: the client (`node-redis` | `ioredis`), Redis's port.
 * Prints `closed` once the application closed everything it opened.
 */
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { StoreUnavailableError } from '../../src/core/errors.js';
import { IdempotencyEngine } from '../../src/engine/engine.js';
import { RedisStore } from '../../src/redis/index.js';
import { startSilentProxy } from './silent-proxy.js';

const [driver, port] = process.argv.slice(2);
const proxy = await startSilentProxy({ host: '127.0.0.1', port: Number(port) });
let close: () => void;
let client: ConstructorParameters<typeof RedisStore>[0]['client'];
if (driver === 'node-redis') {
  const { createClient } = await import('@redis/client');
  const c = createClient({ url: `redis://127.0.0.1:${proxy.port}` });
  c.on('error', () => undefined);
  await c.connect();
  client = c;
  close = () => c.destroy();
} else {
  const { Redis } = await import('ioredis');
  const c = new Redis(proxy.port, '127.0.0.1', { maxRetriesPerRequest: 1 });
  c.on('error', () => undefined);
  client = c;
  close = () => c.disconnect();
}
const store = new RedisStore({ client, prefix: `idem-outage-${randomUUID().slice(0, 8)}`, storeTimeoutMs: 500 });
// The outage starts between the waiter's read of the key and its subscription: the subscriber
// opens while every connection to the server is refused.
const subscribe = store.subscribe.bind(store);
store.subscribe = (scope, key) => {
  proxy.mode('refuse');
  return subscribe(scope, key);
};
const engine = new IdempotencyEngine({ store, inProgress: { wait: 5000 }, leaseMs: 30_000, heartbeatMs: 0 });
const fp = createHash('sha256').update('a').digest();
assert.equal((await engine.begin({ scope: 's', key: 'k', fingerprint: fp })).kind, 'execute');
await assert.rejects(engine.begin({ scope: 's', key: 'k', fingerprint: fp }), StoreUnavailableError);
close();
await proxy.close();
console.log('closed');
