/**
 * Wait mode on Redis where the network fails it (protocol.md K30): a subscriber that opens
 * during an outage. Real Redis behind a real proxy; nothing is mocked.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { exitOf, spawnTs } from './helpers/process.js';
import { needs } from './helpers/services.js';

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
