/**
 * The adapter contract suite (test/contracts/adapter.ts) run against Next.js
 * (test/helpers/harness-next.ts: the example app built by `next build` and served in this
 * process by Next's own server) on every engine, the way test/adapters.test.ts runs it:
 * PGlite always, PostgreSQL when DATABASE_URL is set.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { once } from 'node:events';
import { adapterContractOverStores } from './helpers/adapter-run.js';
import { nextHarness, startNext, stopNext } from './helpers/harness-next.js';
import { sleep } from './helpers/wait.js';

before(async () => void (await startNext()), { timeout: 600_000 });
after(stopNext);

adapterContractOverStores('HTTP adapters (Next.js)', [nextHarness]);

// The shared server must never end a kept-alive connection the client may reuse: a server-side
// idle timeout (Node's default, 5 s) races fetch's own and resets a request sent on it.
it('the shared Next server leaves an idle kept-alive connection open: only the client ends it', async () => {
  const url = new URL(await startNext());
  const socket = net.connect(Number(url.port), url.hostname);
  const ended = once(socket, 'end').then(() => true);
  try {
    await once(socket, 'connect');
    socket.write(`GET /h/none HTTP/1.1\r\nHost: ${url.host}\r\nConnection: keep-alive\r\n\r\n`);
    await once(socket, 'data');
    // Watch the connection idle for longer than Node's default keepAliveTimeout (5 s).
    assert.equal(await Promise.race([ended, sleep(6500).then(() => false)]), false, 'the server ended an idle kept-alive connection');
  } finally {
    socket.destroy();
  }
});
