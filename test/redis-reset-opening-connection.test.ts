/**
 * idem's silent-link reset (protocol.md H25) on an ioredis connection that is still opening. A
 * black hole longer than `silentLinkMs`: idem resets the client while Redis is still silent, and
 * ioredis's reconnect lands in the hole. The TCP connect succeeds (the proxy accepts), so
 * ioredis clears its `connectTimeout`, sends its ready check and waits in status `connect`
 * for a reply that never comes: no ioredis timer covers that state. Once Redis is back, the
 * next reset must drop that connection too (the old code dropped only `ready` ones, so the
 * client stayed in `connect` and every command timed out until a restart). The same state
 * left one ioredis Cluster node answering 503 after the others recovered
 * (test/connection-faults.test.ts, docs/connection-faults-redis.md).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { resolveDriver } from '../src/redis/client.js';
import { toRunner } from '../src/redis/runner.js';
import { REDIS_URL, redisSkip } from './helpers/redis.js';
import { startSilentProxy } from './helpers/silent-proxy.js';
import { sleep } from './helpers/wait.js';

const DEADLINE_MS = 300;
const SILENT_LINK_MS = 900;
/** How long the client may take to answer again once Redis is back: a few resets; generous for a loaded machine. */
const RECOVERY_MS = 15_000;
/** How long the reset may take to send ioredis's reconnect into the hole. */
const INTO_HOLE_MS = 15_000;

describe('the silent-link reset on an ioredis connection still opening', { skip: redisSkip }, () => {
  it('a reconnect that landed in a black hole (status connect, ready check unanswered) is dropped at the next reset: PING answers again once Redis is back', {
    timeout: 60_000,
  }, async (t) => {
    const url = new URL(REDIS_URL);
    const proxy = await startSilentProxy({ host: url.hostname, port: Number(url.port || 6379) });
    const client = new Redis({ host: '127.0.0.1', port: proxy.port, lazyConnect: true });
    client.on('error', () => undefined); // the application's listener
    t.after(async () => {
      client.disconnect();
      await proxy.close();
    });
    await client.connect();
    const runner = toRunner(resolveDriver(client), { timeoutMs: DEADLINE_MS, silentLinkMs: SILENT_LINK_MS });
    const ping = () =>
      runner.command('k', ['PING']).then(
        (reply) => reply,
        () => 'timeout',
      );
    assert.equal(await ping(), 'PONG');

    proxy.mode('silent');
    // Commands miss their deadline until idem resets the link; ioredis reconnects into the hole.
    const started = performance.now();
    const accepted = proxy.accepted();
    while (!(client.status === 'connect' && proxy.accepted() > accepted)) {
      assert.ok(performance.now() - started < INTO_HOLE_MS, `no reconnect into the black hole within ${INTO_HOLE_MS} ms (status ${client.status})`);
      void ping();
      await sleep(100);
    }
    // It stays there: no ioredis timer ends a connection waiting on its ready check.
    await sleep(2 * SILENT_LINK_MS);
    assert.equal(client.status, 'connect', 'ioredis still waits on its ready check in the black hole');

    proxy.mode('forward');
    const back = performance.now();
    for (;;) {
      const reply = await ping();
      if (reply === 'PONG') break;
      assert.ok(
        performance.now() - back < RECOVERY_MS,
        `no PONG within ${RECOVERY_MS} ms of Redis being back (status ${client.status}, last ${String(reply)})`,
      );
      await sleep(100);
    }
    console.log(`# PONG again ${Math.round(performance.now() - back)} ms after Redis was back`);
  });
});
