/**
 * End to end, the example payments API (examples/payments): server start-up: a PGlite directory held by another server, a port in use (scenarios 16-17).
 *
 * The real server runs as child processes (`node --import tsx examples/payments/server.ts`),
 * driven over real TCP connections, on embedded PGlite always and on PostgreSQL when
 * DATABASE_URL is set; see test/helpers/payments/ (suite.ts for the frame, databases.ts for the
 * backends). Tests isolate themselves by unique API keys, idempotency keys and customers, and
 * count PSP charges per customer through `GET /v1/psp/charges`. PGlite admits one process per
 * data directory, so there the local `charges` table is read directly only while no server has
 * the directory open, and two servers at once run on PostgreSQL only.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { rand, request, postCharge, assertFresh, assertReplayOf } from './helpers/payments/api.js';
import { runUntilExit } from './helpers/payments/servers.js';
import { paymentsSuite, T } from './helpers/payments/suite.js';

paymentsSuite('example payments API, end to end: startup', ({ backend, start, shared, sharedDb }) => {
  test('16. a second server on the same PGlite directory exits 1 naming the first; the first keeps serving; a dead holder is taken over', {
    ...T,
    skip: backend.multiProcess ? 'PostgreSQL admits many servers on one database' : false,
  }, async () => {
    const db = backend.database();
    const dir = db.env.IDEM_DATA_DIR!;
    const a = await start(db);
    const second = await runUntilExit(db, {});
    assert.equal(second.code, 1, `the second server must exit 1:\n${second.output}`);
    assert.ok(
      second.output.includes(`idem example: cannot start: ${dir} is in use by process ${a.child.pid}: PGlite allows one process per data directory`),
      `the message names the directory and the holder:\n${second.output}`,
    );
    assert.doesNotMatch(second.output, /listening on/);
    assert.equal(a.child.exitCode, null, 'the first server is still running');
    const apiKey = `sk_test_${rand()}`;
    const key = `lock-${rand()}`;
    const body = { amount: 1600, currency: 'usd', customer: `cus_t16_${rand()}` };
    const created = await postCharge(a, { apiKey, key, body });
    assertFresh(created, 'the first server still serves:');

    // A holder that died without cleaning up (SIGKILL) leaves its pid file; it is taken over at once.
    a.child.kill('SIGKILL');
    await a.exited;
    assert.ok(existsSync(join(dir, 'idem-example.pid')), 'the killed server left its pid file');
    const b = await start(db);
    assertReplayOf(await postCharge(b, { apiKey, key, body }), created, 'the restarted server replays:');
    await b.stop();
    assert.ok(!existsSync(join(dir, 'idem-example.pid')), 'a clean stop removes the pid file');
  });

  test('17. a server whose port is in use exits 1 with one line', T, async () => {
    const server = await shared();
    const db = backend.multiProcess ? sharedDb() : backend.database();
    const result = await runUntilExit(db, { PORT: String(server.port) });
    assert.equal(result.code, 1, `must exit 1:\n${result.output}`);
    assert.match(result.output, new RegExp(`^idem example: cannot start: port ${server.port} on 127\\.0\\.0\\.1 is in use`, 'm'));
    assert.equal(result.output.trim().split('\n').length, 1, `one line:\n${result.output}`);
    if (!backend.multiProcess) assert.ok(!existsSync(join(db.env.IDEM_DATA_DIR!, 'idem-example.pid')), 'the failed start released its lock');
    assert.equal((await request(server.url, 'GET', '/healthz')).status, 200, 'the server on that port is unaffected');
  });
});
