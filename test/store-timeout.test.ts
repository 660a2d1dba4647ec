/**
 * A database that accepts connections and never answers (issue 11, item 1), on every adapter:
 * PostgreSQL behind a TCP proxy that switches to "accept, never forward". With `storeTimeoutMs`
 * each request gets a 503 problem with Retry-After within the deadline + 1 s and the handler
 * does not run; the pool's queue is bounded (`maxPoolWaiting`); connections that timed out are
 * destroyed, and once the proxy forwards again the next request succeeds within a couple of
 * seconds, with no restart. The pool is given no timeouts of its own, so the deadline is idem's.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { PostgresStore } from '../src/postgres/index.js';
import { harnesses, type AdapterHarness, type Route } from './helpers/adapter-harness.js';
import { tableName } from './helpers/engines.js';
import { assertProblem, requestInit } from './helpers/http.js';
import { startSilentProxy, type SilentProxy } from './helpers/silent-proxy.js';
import { within } from './helpers/wait.js';

const DEADLINE_MS = 1000;
const SLOW = { timeout: 60_000 };

describe('a silent database (storeTimeoutMs)', { skip: process.env.DATABASE_URL ? false : 'needs DATABASE_URL (real PostgreSQL)' }, () => {
  const target = new URL(process.env.DATABASE_URL ?? 'postgres://x@127.0.0.1:5432/x');
  const direct = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
  let proxy: SilentProxy;
  const cleanups: Array<() => Promise<void>> = [];
  before(async () => {
    proxy = await startSilentProxy({ host: target.hostname, port: Number(target.port || 5432) });
  });
  after(async () => {
    proxy.mode('forward');
    for (const fn of cleanups.reverse()) await fn().catch(() => undefined);
    await proxy.close();
    await direct.end();
  });

  async function setup(harness: AdapterHarness, route: Route, pool: { max: number; maxPoolWaiting?: number }) {
    const table = tableName();
    await new PostgresStore({ client: direct, table }).migrate();
    cleanups.push(async () => {
      await direct.query(`DROP TABLE IF EXISTS "${table}_blobs"`);
      await direct.query(`DROP TABLE IF EXISTS "${table}"`);
    });
    const url = new URL(target);
    url.port = String(proxy.port);
    const viaProxy = new pg.Pool({ connectionString: url.toString(), max: pool.max });
    viaProxy.on('error', () => undefined);
    cleanups.push(() => Promise.race([viaProxy.end(), new Promise<void>((r) => setTimeout(r, 2000))]));
    const store = new PostgresStore({
      client: viaProxy,
      table,
      storeTimeoutMs: DEADLINE_MS,
      ...(pool.maxPoolWaiting ? { maxPoolWaiting: pool.maxPoolWaiting } : {}),
    });
    const counter = { H: 0 };
    const app = harness.build(
      { store, leaseMs: 10_000, onHandlerError: () => undefined },
      (req, ctx) => {
        counter.H++;
        return route(req, ctx);
      },
      (fn) => void cleanups.push(fn),
    );
    return { app, counter, pool: viaProxy };
  }

  const created: Route = () => ({ status: 201, headers: { 'content-type': 'application/json' }, body: '{"ok":true}' });

  for (const harness of harnesses) {
    it(
      `${harness.name}: 503 + Retry-After within the deadline + 1 s, handler not run; 201 again within 3 s of the database answering, no restart`,
      SLOW,
      async () => {
        const { app, counter, pool } = await setup(harness, created, { max: 3 });
        const send = (key: string) => app.send('/v1/charges', requestInit({ key, json: { a: 1 } }));
        const warm = await within(send('warm'), 10_000, 'warm-up');
        assert.equal(warm.res.status, 201);
        await warm.res.arrayBuffer();
        proxy.mode('silent');
        try {
          // More requests than pool connections: none queues past the deadline.
          const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => within(send(`silent-${i}`), DEADLINE_MS + 1000, `request ${i}`)));
          for (const { res } of answers) {
            await assertProblem(res, 503, 'idempotency-store-unavailable');
            assert.equal(res.headers.get('retry-after'), '1');
          }
          assert.equal(counter.H, 1, 'no handler ran while the database was silent');
        } finally {
          proxy.mode('forward');
        }
        const again = await within(send('after'), 3000, 'the first request after the database answers again');
        assert.equal(again.res.status, 201);
        await again.res.arrayBuffer();
        assert.ok(pool.totalCount <= 3, `no connection leaked (${pool.totalCount} open)`);
        // The silent keys were never claimed: each runs now.
        const retried = await within(send('silent-0'), 2000, 'a retry of a shed request');
        assert.equal(retried.res.status, 201);
        assert.equal(retried.res.headers.get('idempotent-replayed'), null);
        await retried.res.arrayBuffer();
        assert.equal(counter.H, 3);
      },
    );
  }

  it('the pool queue is bounded: past maxPoolWaiting a request gets 503 at once, not after the deadline', SLOW, async () => {
    const { app, counter } = await setup(harnesses[0]!, created, { max: 1, maxPoolWaiting: 1 });
    const send = (key: string) => app.send('/v1/charges', requestInit({ key, json: { a: 1 } }));
    const warm = await within(send('warm'), 10_000, 'warm-up');
    assert.equal(warm.res.status, 201);
    proxy.mode('silent');
    try {
      const holding = within(send('q-0'), DEADLINE_MS + 1000, 'q-0'); // holds the only connection
      const waiting = within(send('q-1'), DEADLINE_MS + 1000, 'q-1'); // waits for it
      const shed = await within(send('q-2'), DEADLINE_MS + 1000, 'q-2'); // over the queue bound
      await assertProblem(shed.res, 503, 'idempotency-store-unavailable');
      assert.ok(shed.ms < DEADLINE_MS / 2, `shed at once (${Math.round(shed.ms)} ms)`);
      for (const { res } of await Promise.all([holding, waiting])) await assertProblem(res, 503, 'idempotency-store-unavailable');
    } finally {
      proxy.mode('forward');
    }
    assert.equal(counter.H, 1);
  });

  it(
    'mid-work: a phase past the deadline fails the attempt (500, retry with the same key), and the retry completes once the database answers',
    SLOW,
    async () => {
      let phases = 0;
      const { app, counter } = await setup(
        harnesses[0]!,
        async (_req, ctx) => {
          await ctx!.phase('first', async () => ++phases);
          if (counter.H === 1) proxy.mode('silent');
          await ctx!.phase('second', async () => ++phases);
          return { status: 201, body: 'done' };
        },
        { max: 3 },
      );
      const send = () => app.send('/v1/charges', requestInit({ key: 'mid', json: { a: 1 } }));
      try {
        const failed = await within(send(), 3 * DEADLINE_MS + 1000, 'the attempt that met the silence');
        await assertProblem(failed.res, 500, 'request-failed-retry');
      } finally {
        proxy.mode('forward');
      }
      // The release met the silence too, so the retry may wait out the 10 s lease (409s).
      const started = performance.now();
      for (;;) {
        const { res } = await within(send(), 5000, 'retry');
        const text = await res.text();
        if (res.status === 201) {
          assert.equal(text, 'done');
          break;
        }
        assert.equal(res.status, 409, text);
        assert.ok(performance.now() - started < 20_000, 'the retry completes within the lease');
        await new Promise((r) => setTimeout(r, 500));
      }
      assert.equal(phases, 2, 'the first phase was not repeated');
    },
  );
});
