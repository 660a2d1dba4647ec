/**
 * Connection faults on RedisStore, for node-redis and ioredis (issue 24 item 1, protocol.md H17,
 * H25), each in a real child process serving HTTP with the configuration of
 * docs/connection-faults-redis.md, on a redis-server of the test's own behind a TCP proxy:
 * - cut: the socket is reset mid-command, no reply;
 * - kill: the server is SIGKILLed, then started again;
 * - black hole: the proxy accepts bytes and never answers (old connections stay dead);
 * - idle: an idle spell longer than the client's timers (node-redis `socketTimeout`).
 * Each fault: the process never exits; every request answers within storeTimeoutMs + 1 s,
 * 503 with Retry-After when it could not claim; once Redis is back the service answers 201
 * again without a restart, under steady traffic and after idleness.
 *
 * And the settings idem refuses: a node-redis client that would never reconnect (issue 24
 * finding 7: `socketTimeout` with the default reconnect strategy closes the client for good
 * after the first idle spell).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createClient, createCluster } from '@redis/client';
import { InvalidOptionError } from '../src/core/errors.js';
import { RedisStore } from '../src/redis/index.js';
import { assertProblem, requestInit } from './helpers/http.js';
import { spawnTs } from './helpers/process.js';
import { startOwnRedis } from './helpers/redis-server.js';
import { REDIS_URL, redisSkip } from './helpers/redis.js';
import { startSilentProxy } from './helpers/silent-proxy.js';
import { poll, sleep, within } from './helpers/wait.js';

const DEADLINE_MS = 1000;
/** node-redis `socketTimeout` in the child: shorter than the idle spells below. */
const SOCKET_TIMEOUT_MS = 2000;
/** idem's silent-link reset: 3 × storeTimeoutMs by default. */
const SILENT_LINK_MS = 3 * DEADLINE_MS;
/** From Redis back to a 201: the silent-link reset, a reconnect, a request; generous for a loaded machine. */
const RECOVERY_MS = 20_000;
const SLOW = { timeout: 240_000 };

type Fault = 'cut' | 'kill' | 'black hole' | 'idle';

/**
 * The child service on its own redis-server behind a proxy. `survives(fault, traffic)` injects
 * the fault, checks the requests made during it, heals it, then sends requests (every 100 ms
 * under steady traffic; after an idle spell longer than every timer, every second) until one
 * gets 201, and checks the process is still running. Resolves with the time to that 201.
 */
async function startService(clientKind: string) {
  const redis = await startOwnRedis();
  const proxy = await startSilentProxy({ host: '127.0.0.1', port: redis.port });
  const app = spawnTs('test/helpers/redis-fault-app.ts', {
    FAULT_CLIENT: clientKind,
    FAULT_REDIS_PORT: String(proxy.port),
    FAULT_STORE_TIMEOUT_MS: String(DEADLINE_MS),
    FAULT_SOCKET_TIMEOUT_MS: String(SOCKET_TIMEOUT_MS),
  });
  const base = `http://127.0.0.1:${(await app.waitFor(/listening (\d+)/))[1]}`;
  let n = 0;

  /** One request with a fresh key: its status, answered within the deadline + 1 s. */
  async function send(what: string): Promise<number> {
    const { res } = await within(fetch(`${base}/v1/charges`, requestInit({ key: `k-${++n}`, json: { n } })), DEADLINE_MS + 1000, what);
    if (res.status === 503) {
      await assertProblem(res, 503, 'idempotency-store-unavailable');
      assert.equal(res.headers.get('retry-after'), '1');
    } else await res.arrayBuffer();
    return res.status;
  }

  /** Sends a request every `everyMs` until one gets 201; returns how long it took. */
  async function recovers(everyMs: number, what: string): Promise<number> {
    const started = performance.now();
    for (;;) {
      const status = await send(what);
      if (status === 201) return performance.now() - started;
      assert.equal(status, 503, what);
      assert.ok(performance.now() - started < RECOVERY_MS, `${what}: 201 again within ${RECOVERY_MS} ms`);
      await sleep(everyMs);
    }
  }

  return {
    async survives(fault: Fault, traffic: 'steady traffic' | 'idleness'): Promise<number> {
      assert.equal(await send(`${fault}: before the fault`), 201);
      const during: number[] = [];
      if (fault === 'cut') {
        // Stalled, the request's command stays in the proxy: the cut lands mid-command.
        proxy.mode('stall');
        const inFlight = send(`${fault}: the request whose command was cut`);
        await poll(() => (proxy.held() > 0 ? true : undefined), 10_000, 'a command in flight');
        proxy.cut();
        proxy.mode('forward');
        during.push(await inFlight);
      }
      if (fault === 'kill') await redis.kill();
      if (fault === 'black hole') proxy.mode('silent');
      if (fault === 'idle') await sleep(SOCKET_TIMEOUT_MS + 1500);
      for (let i = 0; i < 3; i++) during.push(await send(`${fault}: request ${i} during the fault`));
      // A cut loses one command and the client reconnects at once (ioredis resends it); an idle
      // spell is no outage: only its aftermath counts.
      if (fault === 'kill' || fault === 'black hole') assert.deepEqual(during, [503, 503, 503], `${fault}: 503 while down`);
      else for (const s of during) assert.ok(s === 201 || s === 503, `${fault}: ${s}`);
      if (fault === 'kill') await redis.restart();
      if (fault === 'black hole') proxy.mode('forward');
      // Idleness: nothing for longer than every timer (socketTimeout, the silent-link reset).
      if (traffic === 'idleness') await sleep(Math.max(SOCKET_TIMEOUT_MS, SILENT_LINK_MS) + 1500);
      const ms = await recovers(traffic === 'steady traffic' ? 100 : 1000, `${fault}, ${traffic}`);
      assert.equal(app.child.exitCode, null, `the service is still running:\n${app.output()}`);
      assert.equal(app.child.signalCode, null);
      return ms;
    },
    async stop() {
      await app.kill();
      await proxy.close();
      await redis.stop();
    },
  };
}

describe('Redis connection faults (a service on RedisStore in a child process)', { skip: redisSkip }, () => {
  // node-redis and ioredis with their defaults (and an 'error' listener), and node-redis with a
  // socketTimeout, which needs a reconnectStrategy. That one's timer covers idleness on its own,
  // so it runs under steady traffic only (where the timer never fires: every write resets it).
  const rows = [
    { client: 'node-redis', traffic: ['steady traffic', 'idleness'] },
    { client: 'node-redis socketTimeout', traffic: ['steady traffic'] },
    { client: 'ioredis', traffic: ['steady traffic', 'idleness'] },
  ] as const;
  for (const row of rows) {
    for (const traffic of row.traffic) {
      it(
        `${row.client}: cut, kill, black hole, idle spell in turn; each answers within the deadline + 1 s (503 + Retry-After while down) and recovers after ${traffic}; the process never exits`,
        SLOW,
        async (t) => {
          const service = await startService(row.client);
          t.after(() => service.stop());
          for (const fault of ['cut', 'kill', 'black hole', 'idle'] as const) {
            const ms = await service.survives(fault, traffic);
            console.log(`# ${row.client}, ${fault}, ${traffic}: 201 again ${Math.round(ms)} ms after Redis was back`);
          }
        },
      );
    }
  }
  describe('settings that never reconnect are refused (finding 7)', () => {
    it('a node-redis cluster whose defaults have socketTimeout and no reconnect strategy: refused', async () => {
      const cluster = createCluster({ rootNodes: [{ url: REDIS_URL }], defaults: { socket: { socketTimeout: 5000 } } });
      assert.throws(() => new RedisStore({ client: cluster }), /defaults\.socket\.reconnectStrategy/);
    });

    it(
      'node-redis with socketTimeout and the default reconnect strategy: InvalidOptionError naming reconnectStrategy; with a strategy, accepted and answering after an idle spell past socketTimeout',
      SLOW,
      async () => {
        // Without a strategy the first idle spell past socketTimeout closes the client for good
        // (ClientClosedError on every command: 503 until a restart).
        const refused = createClient({ url: REDIS_URL, socket: { socketTimeout: 5000 } });
        assert.throws(
          () => new RedisStore({ client: refused }),
          (error: unknown) => error instanceof InvalidOptionError && error.code === 'IDEM_INVALID_OPTION' && /socket\.reconnectStrategy/.test(error.message),
        );
        const client = createClient({ url: REDIS_URL, socket: { socketTimeout: 500, reconnectStrategy: () => 100 } });
        client.on('error', () => undefined);
        await client.connect();
        try {
          const store = new RedisStore({ client, storeTimeoutMs: DEADLINE_MS });
          const read = () => store.get('faults', `idle-${Math.random()}`, 60_000);
          assert.equal(await read(), undefined);
          await sleep(1500); // the socket timeout fires, node-redis reconnects
          const started = performance.now();
          for (;;) {
            const ok = await read().then(
              () => true,
              () => false,
            );
            if (ok) break;
            assert.ok(performance.now() - started < RECOVERY_MS, 'answers again');
            await sleep(100);
          }
        } finally {
          client.destroy();
        }
      },
    );
  });
});
