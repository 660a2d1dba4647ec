/**
 * Wall-clock steps (NTP, VM resume) on the worker: idem measures its own intervals on the
 * monotonic clock (protocol.md K7), so a +1 h step never ends a live lease early (no second
 * worker runs the handler) and a -1 h step never keeps a hung worker's lease alive past
 * `maxExecutionMs`. The client's retry horizon likewise. `Date.now` is faked for the whole
 * process; the database's clock is untouched, which is why these run on real PostgreSQL only
 * (PGlite runs in this process and takes its `now()` from `Date.now`, so faking the process's
 * wall clock would move the database's clock too).
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import pg from 'pg';
import type { IdempotencyOptions } from '../src/http/idempotency.js';
import type { Queryable } from '../src/postgres/client.js';
import { IdempotentClient } from '../src/client/index.js';
import { harnesses, listen, type Route } from './helpers/adapter-harness.js';
import { freshStore } from './helpers/engines.js';
import { deferred, requestInit } from './helpers/http.js';

const realNow = Date.now;
/** Moves this process's wall clock by `offsetMs` (0 restores it). */
function stepWallClock(offsetMs: number): void {
  Date.now = offsetMs === 0 ? realNow : () => realNow.call(Date) + offsetMs;
}
/** Waits on the monotonic clock (the wall clock is being faked). */
const waitMs = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Polls `check` until true, on the monotonic clock. */
async function until(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await waitMs(50);
  }
}

const SLOW = { timeout: 60_000 };

describe('a wall-clock step on the worker', { skip: process.env.DATABASE_URL ? false : 'needs DATABASE_URL (real PostgreSQL)' }, () => {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 });
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    stepWallClock(0);
    for (const fn of cleanups.reverse()) await fn().catch(() => undefined);
    await pool.end();
  });

  async function setup(options: Partial<IdempotencyOptions<Queryable>>, harness: (typeof harnesses)[number]) {
    const { store, table, drop } = await freshStore(pool);
    cleanups.push(drop);
    const gate = deferred();
    const entered = deferred();
    const counter = { H: 0 };
    const route: Route = async () => {
      counter.H++;
      entered.resolve();
      await gate.promise;
      return { status: 201, headers: { 'content-type': 'application/json' }, body: '{"ok":true}' };
    };
    const app = harness.build({ store, onHandlerError: () => undefined, ...options }, route, (fn) => void cleanups.push(fn));
    const locked = async () => {
      const { rows } = await pool.query(`SELECT (locked_until IS NOT NULL AND locked_until > now()) AS locked FROM "${table}"`);
      return rows[0]?.locked === true;
    };
    return { app, gate, entered, counter, locked };
  }

  for (const harness of harnesses) {
    it(`${harness.name}: +1 h mid-request keeps the heartbeat going: a retry after 3 leases gets 409, the handler runs once`, SLOW, async (t) => {
      t.after(() => stepWallClock(0));
      const leaseMs = 2000;
      const { app, gate, entered, counter } = await setup({ leaseMs, heartbeatMs: 400, maxExecutionMs: 30_000 }, harness);
      const first = app.send('/v1/charges', requestInit({ key: 'jump-forward', json: { amount: 1 } }));
      await entered.promise;
      stepWallClock(3_600_000);
      // Three lease lengths: without heartbeats the lease would have run out twice over.
      await waitMs(3 * leaseMs);
      const retry = await app.send('/v1/charges', requestInit({ key: 'jump-forward', json: { amount: 1 } }));
      assert.equal(retry.status, 409, 'the live lease is not taken over');
      await retry.arrayBuffer();
      assert.equal(counter.H, 1);
      gate.resolve();
      assert.equal((await first).status, 201);
      const replay = await app.send('/v1/charges', requestInit({ key: 'jump-forward', json: { amount: 1 } }));
      assert.equal(replay.status, 201);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await replay.arrayBuffer();
      assert.equal(counter.H, 1, 'the handler ran once');
    });

    it(`${harness.name}: -1 h mid-request: 409 inside the budget, and the heartbeat still stops at maxExecutionMs`, SLOW, async (t) => {
      t.after(() => stepWallClock(0));
      const leaseMs = 2000;
      const maxExecutionMs = 7000;
      const { app, gate, entered, counter, locked } = await setup({ leaseMs, heartbeatMs: 400, maxExecutionMs }, harness);
      const first = app.send('/v1/charges', requestInit({ key: 'jump-back', json: { amount: 1 } }));
      await entered.promise;
      const startedAt = performance.now();
      stepWallClock(-3_600_000);
      await waitMs(2 * leaseMs);
      const early = await app.send('/v1/charges', requestInit({ key: 'jump-back', json: { amount: 1 } }));
      assert.equal(early.status, 409, 'inside the budget the live lease holds');
      await early.arrayBuffer();
      // The budget ends maxExecutionMs after the claim by the monotonic clock; the lease runs
      // out one lease later. With the wall clock an hour behind, a Date.now() budget would
      // keep the heartbeat going for another hour.
      await until(async () => !(await locked()), maxExecutionMs + 4 * leaseMs, 'the hung lease to run out');
      assert.ok(performance.now() - startedAt >= maxExecutionMs - 100, 'not before the budget');
      const takeover = app.send('/v1/charges', requestInit({ key: 'jump-back', json: { amount: 1 } }));
      await until(async () => counter.H === 2, 10_000, 'the retry to take over');
      gate.resolve();
      assert.equal((await takeover).status, 201);
      assert.equal((await first).status, 409, 'the hung worker lost its lease');
    });
  }
});

describe('the client retry horizon under a wall-clock step', () => {
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    stepWallClock(0);
    for (const fn of cleanups) await fn();
  });
  /** A server answering 503 to everything, counting requests; `onRequest` runs on each. */
  async function unavailable(onRequest: (n: number) => void = () => undefined) {
    let n = 0;
    const server = http.createServer((req, res) => {
      req.resume();
      onRequest(++n);
      res.writeHead(503, { 'content-type': 'text/plain' }).end('later');
    });
    const s = await listen(server);
    cleanups.push(s.close);
    return { url: s.url, count: () => n };
  }

  it('+1 h after the first attempt does not end the horizon: every allowed attempt is made', async (t) => {
    t.after(() => stepWallClock(0));
    const server = await unavailable((n) => n === 1 && stepWallClock(3_600_000));
    const gaveUp: string[] = [];
    const client = new IdempotentClient({ maxAttempts: 4, maxElapsedMs: 600_000, baseDelayMs: 5, maxDelayMs: 20, onGiveUp: (e) => gaveUp.push(e.reason) });
    const res = await client.fetch(server.url + '/v1/charges', { method: 'POST', body: '{}' });
    assert.equal(res.status, 503);
    assert.equal(server.count(), 4, 'four attempts');
    assert.deepEqual(gaveUp, ['attempts']);
  });

  it('-1 h does not stretch the horizon: it ends after maxElapsedMs of monotonic time', { timeout: 20_000 }, async (t) => {
    t.after(() => stepWallClock(0));
    const server = await unavailable((n) => n === 1 && stepWallClock(-3_600_000));
    const gaveUp: string[] = [];
    const client = new IdempotentClient({ maxAttempts: 10_000, maxElapsedMs: 500, baseDelayMs: 5, maxDelayMs: 20, onGiveUp: (e) => gaveUp.push(e.reason) });
    const started = performance.now();
    const res = await client.fetch(server.url + '/v1/charges', { method: 'POST', body: '{}' });
    assert.equal(res.status, 503);
    assert.deepEqual(gaveUp, ['elapsed']);
    assert.ok(performance.now() - started < 5_000, 'gave up near maxElapsedMs');
  });
});
