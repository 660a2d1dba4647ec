/**
 * A Redis that accepts connections and never answers (protocol.md H17), for both clients and
 * every adapter the PostgreSQL test covers: the real Redis behind a TCP proxy. With
 * `storeTimeoutMs` each request gets a 503 problem with Retry-After within the deadline + 1 s
 * and the handler does not run; once the proxy forwards again, requests succeed again with no
 * restart. Two kinds of silence:
 * - `stall`: Redis stops answering and later resumes (a stalled node: a long script, a fork, a
 *   paused VM): every late reply arrives in order on the same connection, and the next request
 *   succeeds at once, with no client setting.
 * - `silent`: a black hole that reads and drops (a proxy or balancer that lost the flow): the
 *   connection stays dead for good, so recovery needs a reconnect. ioredis here has its own
 *   `socketTimeout` (no data for that long while a command waits), three times idem's
 *   deadline, so a 503 within the deadline + 1 s can only come from idem. node-redis has no
 *   timer that fires under traffic (its `socket.socketTimeout` is an inactivity timer that
 *   every write resets, and none is set here): idem's silent-link reset makes it reconnect
 *   (protocol.md H25, `silentLinkMs`).
 *
 * And a claim whose reply comes after the deadline (the command was queued and ran late): the
 * key is claimed by nobody, answers 409 until its lease ends, then the next retry takes it over
 * and runs the handler once.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createClient } from '@redis/client';
import { Redis } from 'ioredis';
import { RedisStore, type RedisClientLike } from '../src/redis/index.js';
import { harnesses, type AdapterHarness, type Route } from './helpers/adapter-harness.js';
import { assertProblem, requestInit } from './helpers/http.js';
import { REDIS_URL, dropPrefix, randomPrefix, redisSkip, singleClients, type TestClient } from './helpers/redis.js';
import { startSilentProxy, type SilentProxy } from './helpers/silent-proxy.js';
import { within } from './helpers/wait.js';

const DEADLINE_MS = 1000;
/** The client's own dead-socket detection: well past idem's deadline. */
const CLIENT_SOCKET_TIMEOUT_MS = 3 * DEADLINE_MS;
/** Recovery: the client's socket timeout, its reconnect, and a request. */
const RECOVERY_MS = 15_000;
const SLOW = { timeout: 90_000 };

/** The two clients, connected through `port`; ioredis with its dead-socket timeout. */
const viaProxy: Array<{ name: string; open(port: number): Promise<{ client: RedisClientLike; close(): Promise<void> }> }> = [
  {
    name: 'node-redis',
    async open(port) {
      // No dead-socket setting: node-redis has none that works under traffic; idem resets it (see above).
      const client = createClient({ url: `redis://127.0.0.1:${port}` });
      client.on('error', () => undefined);
      await client.connect();
      return { client, close: async () => void client.destroy() };
    },
  },
  {
    name: 'ioredis',
    async open(port) {
      const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true, socketTimeout: CLIENT_SOCKET_TIMEOUT_MS, retryStrategy: () => 100 });
      client.on('error', () => undefined);
      await client.connect();
      return { client, close: async () => void client.disconnect() };
    },
  },
];

describe('a silent Redis (RedisStore storeTimeoutMs)', { skip: redisSkip }, () => {
  const target = new URL(REDIS_URL);
  let proxy: SilentProxy;
  let direct: TestClient;
  const prefixes: string[] = [];
  const cleanups: Array<() => Promise<void>> = [];
  before(async () => {
    proxy = await startSilentProxy({ host: target.hostname, port: Number(target.port || 6379) });
    direct = await singleClients[0]!.open();
  });
  after(async () => {
    proxy.mode('forward');
    for (const fn of cleanups.reverse()) await fn().catch(() => undefined);
    for (const prefix of prefixes) await dropPrefix(direct, prefix);
    await direct.close();
    await proxy.close();
  });

  function build(harness: AdapterHarness, client: RedisClientLike, route: Route, options: { leaseMs?: number; replayFastPath?: boolean } = {}) {
    const prefix = randomPrefix();
    prefixes.push(prefix);
    const store = new RedisStore({ client, prefix, storeTimeoutMs: DEADLINE_MS, replayFastPath: options.replayFastPath ?? true });
    const counter = { H: 0 };
    const app = harness.build(
      { store: store as never, leaseMs: options.leaseMs ?? 10_000, onHandlerError: () => undefined },
      (req, ctx) => {
        counter.H++;
        return route(req, ctx);
      },
      (fn) => void cleanups.push(fn),
    );
    return { app, counter };
  }

  const created: Route = () => ({ status: 201, headers: { 'content-type': 'application/json' }, body: '{"ok":true}' });

  const [nodeRedis, ioredis] = viaProxy as [(typeof viaProxy)[0], (typeof viaProxy)[0]];
  const cases: Array<{ c: (typeof viaProxy)[0]; mode: 'stall' | 'silent'; on: AdapterHarness[]; recovers: boolean }> = [
    { c: ioredis, mode: 'silent', on: harnesses, recovers: true },
    { c: nodeRedis, mode: 'stall', on: harnesses, recovers: true },
    { c: ioredis, mode: 'stall', on: harnesses.slice(0, 1), recovers: true },
    { c: nodeRedis, mode: 'silent', on: harnesses.slice(0, 1), recovers: true },
  ];
  for (const { c, mode, on, recovers } of cases) {
    for (const harness of on) {
      const then = recovers ? '; 201 again once Redis answers, no restart' : '';
      it(`${c.name}, ${harness.name}, ${mode}: 503 + Retry-After within the deadline + 1 s, handler not run${then}`, SLOW, async () => {
        const { client, close } = await c.open(proxy.port);
        cleanups.push(close);
        const { app, counter } = build(harness, client, created);
        const send = (key: string) => app.send('/v1/charges', requestInit({ key, json: { a: 1 } }));
        const warm = await within(send('warm'), 10_000, 'warm-up');
        assert.equal(warm.res.status, 201);
        await warm.res.arrayBuffer();
        proxy.mode(mode);
        try {
          const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => within(send(`silent-${i}`), DEADLINE_MS + 1000, `request ${i}`)));
          for (const { res } of answers) {
            await assertProblem(res, 503, 'idempotency-store-unavailable');
            assert.equal(res.headers.get('retry-after'), '1');
          }
          assert.equal(counter.H, 1, 'no handler ran while Redis was silent');
        } finally {
          proxy.mode('forward');
        }
        if (!recovers) return;
        // Until the client drops its dead socket, requests still fail closed within the deadline.
        const started = performance.now();
        for (;;) {
          const { res } = await within(send('after'), DEADLINE_MS + 1000, 'a request after Redis answers again');
          const text = await res.text();
          if (res.status === 201) break;
          assert.equal(res.status, 503, text);
          assert.ok(performance.now() - started < RECOVERY_MS, `201 again within ${RECOVERY_MS} ms of Redis answering`);
        }
        // The silent keys were never claimed: each runs now.
        const retried = await within(send('silent-0'), DEADLINE_MS + 1000, 'a retry of a shed request');
        assert.equal(retried.res.status, 201);
        assert.equal(retried.res.headers.get('idempotent-replayed'), null);
        await retried.res.arrayBuffer();
        assert.equal(counter.H, 3);
      });
    }
  }

  it('a claim that lands after the deadline leaves no stuck key: 409 until its lease ends, then the retry takes it over', SLOW, async () => {
    // A client whose replies are held back while `hold` is set: the command runs on the real
    // Redis at once, its answer reaches idem only after the deadline.
    const real = await singleClients[0]!.open();
    cleanups.push(() => real.close());
    let hold: Promise<void> | undefined;
    const late: RedisClientLike = {
      async sendCommand(args: string[]) {
        const reply = await (real.client as { sendCommand(a: string[]): Promise<unknown> }).sendCommand(args);
        if (hold) await hold;
        return reply;
      },
    };
    const LEASE_MS = 2000;
    const { app, counter } = build(harnesses[0]!, late, created, { leaseMs: LEASE_MS, replayFastPath: false });
    const send = () => app.send('/v1/charges', requestInit({ key: 'late', json: { a: 1 } }));
    let release!: () => void;
    hold = new Promise<void>((r) => (release = r));
    const first = await within(send(), DEADLINE_MS + 1000, 'the request whose claim answers late');
    await assertProblem(first.res, 503, 'idempotency-store-unavailable');
    hold = undefined;
    release();
    assert.equal(counter.H, 0, 'the handler did not run');
    const started = performance.now();
    const statuses: number[] = [];
    for (;;) {
      const { res } = await within(send(), DEADLINE_MS + 1000, 'retry');
      await res.arrayBuffer();
      statuses.push(res.status);
      if (res.status === 201) break;
      assert.equal(res.status, 409, 'the late claim holds the key until its lease ends');
      assert.ok(performance.now() - started < LEASE_MS + 5000, `taken over once the ${LEASE_MS} ms lease ended (${statuses.join(',')})`);
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(statuses[0], 409, 'the claim did land late: the first retry found the key held');
    assert.equal(counter.H, 1, 'the handler ran once');
  });
});
