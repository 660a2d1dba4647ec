/**
 * idem/client. The retry rules against a scripted local HTTP server (exact statuses and
 * headers), the Node file store on a real directory, and the end-to-end cases against the real
 * example payments server (a child process on a fresh PGlite directory, and on a fresh PostgreSQL
 * database when DATABASE_URL is set), through a recording proxy that can lose a response after
 * the server committed it. PSP charges are counted through `GET /v1/psp/charges`.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  FileIntentStore,
  GaveUpError,
  HorizonExceedsRetentionError,
  IdempotentClient,
  InvalidClientOptionError,
  MemoryIntentStore,
  fullJitterDelayMs,
  parseRetryAfterMs,
  type IntentRecord,
  type RetryEvent,
} from '../src/client/node.js';
import {
  backends,
  pspCharges,
  rand,
  spawnTs,
  startPaymentsServer,
  startRecordingProxy,
  startScriptedServer,
  type PaymentsServer,
} from './helpers/client-harness.js';

const T = { timeout: 120_000 };
const tmpDirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), 'idem-intents-'));
  tmpDirs.push(dir);
  return dir;
};
after(() => {
  for (const dir of tmpDirs) rmSync(dir, { recursive: true, force: true });
});

/** Fast retries for the scripted-server tests. */
const fast = { baseDelayMs: 20, maxDelayMs: 50, attemptTimeoutMs: 5000 };
const json = (body: unknown) => ({ method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('idem/client: retry policy', { concurrency: true }, () => {
  test('Retry-After: delta-seconds and HTTP-date, malformed ignored', () => {
    const now = Date.parse('2026-11-29T12:00:00Z');
    assert.equal(parseRetryAfterMs('3', now), 3000, 'delta-seconds');
    assert.equal(parseRetryAfterMs(' 0 ', now), 0, 'zero');
    assert.equal(parseRetryAfterMs('Sun, 29 Nov 2026 12:00:05 GMT', now), 5000, 'HTTP-date');
    assert.equal(parseRetryAfterMs('Sun, 29 Nov 2026 11:00:00 GMT', now), 0, 'a date in the past is no wait');
    assert.equal(parseRetryAfterMs('1.5', now), undefined, 'not an integer');
    assert.equal(parseRetryAfterMs('soon', now), undefined, 'not a date');
    assert.equal(parseRetryAfterMs(null, now), undefined, 'absent');
  });

  test('full jitter: uniform below min(cap, base × 2^(n-1))', () => {
    assert.equal(
      fullJitterDelayMs(1, 100, 10_000, () => 0.999),
      99,
      'first retry below base',
    );
    assert.equal(
      fullJitterDelayMs(4, 100, 10_000, () => 0.5),
      400,
      'fourth retry: half of 800',
    );
    assert.equal(
      fullJitterDelayMs(30, 100, 10_000, () => 0.5),
      5000,
      'capped at maxDelayMs',
    );
    assert.equal(
      fullJitterDelayMs(3, 100, 10_000, () => 0),
      0,
      'full jitter reaches 0',
    );
  });

  test('horizon validation: maxElapsedMs + attemptTimeoutMs must stay below the server retention', () => {
    assert.throws(
      () => new IdempotentClient({ serverRetentionMs: 60_000, maxElapsedMs: 50_000, attemptTimeoutMs: 10_000 }),
      (error: unknown) => error instanceof HorizonExceedsRetentionError && error.code === 'IDEM_CLIENT_HORIZON_EXCEEDS_RETENTION' && error.horizonMs === 60_000,
      'horizon equal to retention is refused',
    );
    assert.throws(() => new IdempotentClient({ maxElapsedMs: 86_400_000 }), HorizonExceedsRetentionError, 'a day against the default 24 h retention');
    assert.ok(new IdempotentClient({ serverRetentionMs: 60_001, maxElapsedMs: 50_000, attemptTimeoutMs: 10_000 }), 'one ms below is accepted');
    assert.throws(() => new IdempotentClient({ maxAttempts: 0 }), InvalidClientOptionError, 'zero attempts');
    assert.throws(() => new IdempotentClient({ baseDelayMs: -1 }), InvalidClientOptionError, 'negative delay');
  });

  test('5xx and 409 are retried with the same key and the same body bytes; the key is minted once per intent', T, async () => {
    const server = await startScriptedServer([
      { status: 503 },
      'reset',
      { status: 409, headers: { 'retry-after': '0' } },
      { status: 500 },
      { status: 201, body: 'ok' },
    ]);
    try {
      let minted = 0;
      const retries: RetryEvent[] = [];
      const client = new IdempotentClient({
        ...fast,
        generateKey: () => `k-${++minted}-${rand()}`,
        onRetry: (e) => retries.push(e),
      });
      const body = Buffer.from([0, 255, 1, 254, 0x7b]); // not UTF-8: the bytes must survive as they are
      const res = await client.fetch(`${server.url}/x`, { method: 'POST', body });
      assert.equal(res.status, 201, 'final answer');
      assert.equal(await res.text(), 'ok', 'body readable');
      assert.equal(res.attempts, 5, 'five attempts');
      assert.equal(minted, 1, 'generateKey ran once for the intent, not once per attempt');
      const keys = new Set(server.seen.map((s) => s.key));
      assert.deepEqual([...keys], [res.idempotencyKey], 'every attempt carried the one key');
      assert.ok(
        server.seen.every((s) => s.body.equals(body)),
        'every attempt carried identical body bytes',
      );
      assert.deepEqual(
        retries.map((r) => r.status ?? 'error'),
        [503, 'error', 409, 500],
        'onRetry saw each retryable outcome',
      );
      assert.equal(retries.map((r) => r.attempt).join(','), '1,2,3,4', 'attempt numbers');
      assert.deepEqual(await client.store.list(), [], 'the finished intent was pruned');
    } finally {
      await server.close();
    }
  });

  test('400, 422 and other 4xx are final: no retry', T, async () => {
    for (const status of [400, 401, 404, 422]) {
      const server = await startScriptedServer([{ status }, { status: 201 }]);
      try {
        const client = new IdempotentClient(fast);
        const res = await client.fetch(`${server.url}/x`, json({ a: 1 }));
        assert.equal(res.status, status, `${status} returned`);
        assert.equal(server.seen.length, 1, `${status} sent once`);
      } finally {
        await server.close();
      }
    }
  });

  test('a replayed 500 is final: the stored outcome does not change by asking again', T, async () => {
    const server = await startScriptedServer([{ status: 500, headers: { 'idempotent-replayed': 'true' } }, { status: 201 }]);
    try {
      const res = await new IdempotentClient(fast).fetch(`${server.url}/x`, json({}));
      assert.equal(res.status, 500, 'the replay is returned');
      assert.equal(res.replayed, true, 'marked as a replay');
      assert.equal(server.seen.length, 1, 'not retried');
    } finally {
      await server.close();
    }
  });

  test('Retry-After is honoured: delta-seconds and HTTP-date, also above the backoff cap', T, async () => {
    // An HTTP-date (whole seconds, so 3-4 s ahead) made when the 503 is sent, not when the test
    // starts: on a loaded machine the server's start and the first attempt can take seconds.
    const server = await startScriptedServer([
      { status: 503, headers: () => ({ 'retry-after': new Date(Date.now() + 4000).toUTCString() }) },
      { status: 429, headers: { 'retry-after': '1' } },
      { status: 200 },
    ]);
    try {
      const retries: RetryEvent[] = [];
      const res = await new IdempotentClient({ ...fast, onRetry: (e) => retries.push(e) }).fetch(`${server.url}/x`, json({}));
      assert.equal(res.status, 200, 'final answer');
      assert.ok(retries[0]!.delayMs >= 1000, `HTTP-date honoured (${retries[0]!.delayMs} ms)`);
      assert.equal(retries[1]!.retryAfterMs, 1000, 'delta-seconds parsed');
      assert.ok(retries[1]!.delayMs >= 1000, `waits at least Retry-After (${retries[1]!.delayMs} ms)`);
      const gaps = server.seen.slice(1).map((s, i) => s.at - server.seen[i]!.at);
      assert.ok(gaps[0]! >= retries[0]!.delayMs - 10, `the second attempt came after the HTTP-date (${gaps[0]} ms)`);
      assert.ok(gaps[1]! >= 990, `the third attempt came ≥ 1 s after the second (${gaps[1]} ms)`);
    } finally {
      await server.close();
    }
  });

  test('giving up: the last 5xx is returned at maxAttempts; only network errors throw GaveUpError; onGiveUp fires; the record is pruned', T, async () => {
    const server = await startScriptedServer([{ status: 503 }]);
    try {
      const gaveUp: unknown[] = [];
      const client = new IdempotentClient({ ...fast, maxAttempts: 3, onGiveUp: (e) => gaveUp.push(e) });
      const res = await client.fetch(`${server.url}/x`, json({}));
      assert.equal(res.status, 503, 'the last response');
      assert.equal(server.seen.length, 3, 'three attempts');
      assert.deepEqual(
        gaveUp.map((e) => (e as { reason: string; status: number }).reason + (e as { status: number }).status),
        ['attempts503'],
      );
      assert.deepEqual(await client.store.list(), [], 'pruned');
    } finally {
      await server.close();
    }
    const dead = await startScriptedServer(['reset']);
    try {
      const client = new IdempotentClient({ ...fast, maxAttempts: 2 });
      await assert.rejects(
        client.fetch(`${dead.url}/x`, json({})),
        (error: unknown) => error instanceof GaveUpError && error.attempts === 2 && error.reason === 'attempts',
      );
      assert.equal(dead.seen.length, 2, 'two attempts');
    } finally {
      await dead.close();
    }
  });

  test('a timed-out attempt is retried (per-attempt AbortSignal)', T, async () => {
    let n = 0;
    const { createServer } = await import('node:http');
    const server = createServer((_req, res) => {
      if (n++ === 0) return; // never answers the first attempt
      res.writeHead(201).end();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const retries: RetryEvent[] = [];
      const client = new IdempotentClient({ ...fast, attemptTimeoutMs: 300, onRetry: (e) => retries.push(e) });
      const res = await client.fetch(`http://127.0.0.1:${(server.address() as { port: number }).port}/x`, json({}));
      assert.equal(res.status, 201, 'second attempt answered');
      assert.equal((retries[0]!.error as Error).name, 'TimeoutError', 'the first attempt timed out');
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  test('GET passes through without a key and without retries; credentials are never persisted by default', T, async () => {
    const server = await startScriptedServer([{ status: 503 }]);
    try {
      const client = new IdempotentClient(fast);
      const res = await client.fetch(`${server.url}/x`);
      assert.equal(res.status, 503, 'returned as is');
      assert.equal(server.seen.length, 1, 'not retried');
      assert.equal(server.seen[0]!.key, undefined, 'no key on a GET');
      assert.equal(res.idempotencyKey, null, 'no intent');

      const intent = await client.createIntent(`${server.url}/y`, {
        method: 'POST',
        headers: { authorization: 'Bearer secret', cookie: 'sid=1', 'x-api-version': '2' },
        body: 'a=1',
      });
      const stored = (await client.store.get(intent.key))!;
      const names = stored.headers.map(([n]) => n);
      assert.ok(!names.includes('authorization') && !names.includes('cookie'), `no credentials persisted: ${names.join(',')}`);
      assert.ok(names.includes('x-api-version'), 'other headers are');
      const opted = new IdempotentClient({ ...fast, persistCredentials: true });
      const withCreds = await opted.createIntent(`${server.url}/y`, { method: 'POST', headers: { authorization: 'Bearer secret' } });
      assert.ok(
        withCreds.headers.some(([n]) => n === 'authorization'),
        'persisted when opted in',
      );
    } finally {
      await server.close();
    }
  });

  test('resumePending gives up an intent past its horizon without sending it, and deletes finished leftovers', T, async () => {
    const server = await startScriptedServer([{ status: 201 }]);
    try {
      const store = new MemoryIntentStore();
      const old: IntentRecord = {
        key: 'old',
        method: 'POST',
        url: `${server.url}/x`,
        headers: [],
        body: null,
        createdAt: Date.now() - 10_000,
        attempts: 1,
        state: 'pending',
        updatedAt: Date.now() - 10_000,
      };
      await store.put(old);
      await store.put({ ...old, key: 'finished', createdAt: Date.now(), state: 'done' });
      await store.put({ ...old, key: 'fresh', createdAt: Date.now() });
      const gaveUp: string[] = [];
      const client = new IdempotentClient({ ...fast, store, maxElapsedMs: 5000, onGiveUp: (e) => gaveUp.push(e.key) });
      const results = await client.resumePending();
      assert.deepEqual(gaveUp, ['old'], 'old intent given up');
      assert.deepEqual(
        results.map((r) => [r.key, r.ok ? r.response.status : (r.error as Error).name]).sort(),
        [
          ['fresh', 201],
          ['old', 'GaveUpError'],
        ],
        'results',
      );
      assert.deepEqual(
        server.seen.map((s) => s.key),
        ['fresh'],
        'only the fresh intent was sent',
      );
      assert.deepEqual(await store.list(), [], 'all pruned');
    } finally {
      await server.close();
    }
  });
});

describe('idem/client: FileIntentStore', () => {
  test('put/get/list/delete on a real directory; temporary files of a crashed write are ignored', async () => {
    const dir = join(tempDir(), 'nested', 'intents');
    const store = new FileIntentStore({ dir });
    assert.deepEqual(await store.list(), [], 'a missing directory is empty');
    const record: IntentRecord = {
      key: 'a/b "c"',
      method: 'POST',
      url: 'http://x/',
      headers: [['content-type', 'text/plain']],
      body: 'AAH/',
      createdAt: 1,
      attempts: 0,
      state: 'pending',
      updatedAt: 1,
    };
    await store.put(record);
    await store.put({ ...record, attempts: 1 });
    assert.deepEqual(await store.get(record.key), { ...record, attempts: 1 }, 'replaced, read back');
    writeFileSync(join(dir, `${readdirSync(dir)[0]}.1234abcd`), '{"torn'); // what a crash mid-write leaves
    assert.equal((await store.list()).length, 1, 'one record; the temporary file is not read');
    await store.delete(record.key);
    await store.delete(record.key);
    assert.equal(await store.get(record.key), undefined, 'deleted');
    assert.ok(existsSync(dir), 'directory kept');
  });
});

for (const backend of backends()) {
  describe(`idem/client against the example payments server (${backend.name})`, { concurrency: true }, () => {
    let server: PaymentsServer;
    const apiKey = `sk_test_${rand()}`;
    const auth = { authorization: `Bearer ${apiKey}` };
    const charge = (customer: string, amount = 1999) => json({ amount, currency: 'usd', customer });

    before(
      async () => {
        // PSP latency 1500 ms: long enough to find a first request still in flight (409).
        server = await startPaymentsServer({ ...(await backend.create()), PSP_LATENCY_MS: '1500' });
      },
      { timeout: 150_000 },
    );
    after(async () => {
      await server?.stop();
      await backend.drop();
    });

    test('connection reset after the server committed: retried with the same key, one PSP charge, the same response (a replay)', T, async () => {
      const customer = `cus_reset_${rand()}`;
      const store = new FileIntentStore({ dir: tempDir() });
      const beforeAttempt: Array<IntentRecord | undefined> = [];
      const proxy = await startRecordingProxy({
        upstream: server.url,
        fate: (_req, n) => (n === 0 ? 'reset' : 'pass'),
        // What the client had persisted when each attempt reached the wire.
        onRequest: async (req) => void beforeAttempt.push(req.key ? await store.get(req.key) : undefined),
      });
      try {
        const retries: RetryEvent[] = [];
        const client = new IdempotentClient({ store, headers: auth, baseDelayMs: 50, maxDelayMs: 200, onRetry: (e) => retries.push(e) });
        const res = await client.fetch(`${proxy.url}/v1/charges`, charge(customer));
        const body = await res.text();
        assert.equal(res.status, 201, `201 after the retry: ${body}`);
        assert.equal(res.replayed, true, 'the retry got the replay of the committed first attempt');
        assert.equal(proxy.seen[0]!.fate, 'reset', 'the first answer was lost');
        assert.equal(proxy.seen[0]!.status, 201, 'the server had committed the first attempt');
        assert.equal(body, proxy.seen[0]!.responseBody!.toString(), 'byte-identical to the lost first response');
        assert.ok(proxy.seen.length >= 2, 'retried');
        assert.ok(
          proxy.seen.every((s) => s.key === res.idempotencyKey),
          `one key on every attempt: ${proxy.seen.map((s) => s.key).join(', ')}`,
        );
        assert.ok(
          proxy.seen.every((s) => s.body.equals(proxy.seen[0]!.body)),
          'identical body bytes on every attempt',
        );
        assert.equal(beforeAttempt[0]?.key, res.idempotencyKey, 'the intent was persisted before the first attempt went out');
        assert.equal(beforeAttempt[0]?.attempts, 1, 'with its attempt counted');
        assert.ok(!beforeAttempt[0]!.headers.some(([n]) => n === 'authorization'), 'without the credential');
        assert.ok(retries[0]?.error, 'onRetry saw the network error');
        const psp = await pspCharges(server.url, customer);
        assert.equal(psp.length, 1, 'exactly one PSP charge');
        assert.equal(psp[0]!.id, (JSON.parse(body) as { psp_charge_id: string }).psp_charge_id, 'the charge of the response');
        assert.deepEqual(await store.list(), [], 'the finished intent was pruned');
      } finally {
        await proxy.close();
      }
    });

    test('a client process SIGKILLed between attempts and restarted: resumePending completes with the same key, one PSP charge', T, async () => {
      const customer = `cus_kill_${rand()}`;
      const dir = tempDir();
      const proxy = await startRecordingProxy({ upstream: server.url, fate: (_req, n) => (n === 0 ? 'reset' : 'pass') });
      try {
        const env = { CLIENT_TARGET: proxy.url, CLIENT_STORE_DIR: dir, CLIENT_API_KEY: apiKey, CLIENT_CUSTOMER: customer };
        const first = spawnTs('test/helpers/client-process.ts', { ...env, CLIENT_MODE: 'send' });
        const retry = JSON.parse((await first.waitFor(/^retry (.*)$/m))[1]!) as RetryEvent;
        await first.kill('SIGKILL'); // while it waits ~60 s before its second attempt
        assert.equal(retry.attempt, 1, 'killed after the first attempt');
        assert.equal(proxy.seen.length, 1, 'one attempt reached the server');
        assert.equal(proxy.seen[0]!.status, 201, 'and the server committed it');

        const pending = await new FileIntentStore({ dir }).list();
        assert.equal(pending.length, 1, 'the intent survived the kill');
        assert.deepEqual([pending[0]!.key, pending[0]!.state, pending[0]!.attempts], [proxy.seen[0]!.key, 'pending', 1], 'pending, one attempt');

        const second = spawnTs('test/helpers/client-process.ts', { ...env, CLIENT_MODE: 'resume' });
        const resumed = JSON.parse((await second.waitFor(/^resumed (.*)$/m))[1]!) as Array<{
          key: string;
          status: number;
          replayed: boolean;
          attempts: number;
          body: string;
        }>;
        await second.exited;
        assert.equal(resumed.length, 1, `one intent resumed: ${JSON.stringify(resumed)}`);
        assert.equal(resumed[0]!.key, retry.key, 'with the original key');
        assert.equal(resumed[0]!.status, 201, `201: ${resumed[0]!.body}`);
        assert.equal(resumed[0]!.replayed, true, 'the replay of the committed first attempt');
        assert.equal(resumed[0]!.attempts, 2, 'attempts counted across the restart');
        assert.equal(resumed[0]!.body, proxy.seen[0]!.responseBody!.toString(), 'the lost response, byte for byte');
        assert.deepEqual(
          proxy.seen.map((s) => s.key),
          [retry.key, retry.key],
          'the same key before and after the restart',
        );
        assert.equal((await pspCharges(server.url, customer)).length, 1, 'exactly one PSP charge');
        assert.deepEqual(await new FileIntentStore({ dir }).list(), [], 'pruned after the final response');
      } finally {
        await proxy.close();
      }
    });

    test('409 while the first request is in flight: the client waits (Retry-After) and gets the replay', T, async () => {
      const customer = `cus_409_${rand()}`;
      const key = `order-${rand()}`;
      const init = charge(customer);
      // Another attempt of the same intent (say, from a previous run of the app) is in flight.
      const inFlight = fetch(`${server.url}/v1/charges`, { ...init, headers: { ...init.headers, ...auth, 'idempotency-key': key } });
      await new Promise((r) => setTimeout(r, 300));
      const retries: RetryEvent[] = [];
      const client = new IdempotentClient({ headers: auth, baseDelayMs: 50, maxDelayMs: 100, onRetry: (e) => retries.push(e) });
      const res = await client.fetch(`${server.url}/v1/charges`, { ...init, headers: { ...init.headers, 'idempotency-key': key } });
      const first = await inFlight;
      assert.equal(first.status, 201, 'the first request finished');
      assert.equal(res.status, 201, 'the client got the outcome');
      assert.equal(res.replayed, true, 'as a replay');
      assert.equal(await res.text(), await first.text(), 'the same response');
      assert.equal(res.idempotencyKey, key, "the caller's own key was kept");
      assert.ok(retries.length >= 1 && retries[0]!.status === 409, `first answer was 409: ${JSON.stringify(retries)}`);
      assert.equal(retries[0]!.retryAfterMs, 1000, 'with Retry-After: 1');
      assert.ok(retries[0]!.delayMs >= 1000, 'which the client honoured over its 100 ms backoff cap');
      assert.equal((await pspCharges(server.url, customer)).length, 1, 'exactly one PSP charge');
    });

    test('the example (examples/client/demo.ts) with a connection drop after every first attempt: one PSP charge per intent', T, async () => {
      const demo = spawnTs('examples/client/demo.ts', { API_URL: server.url, INTENTS: '3' });
      const { code } = await demo.exited;
      assert.equal(code, 0, `the demo failed:\n${demo.output()}`);
      assert.match(demo.output(), /3 responses dropped after the server committed them/, demo.output());
      assert.match(demo.output(), /exactly one PSP charge per intent/, demo.output());
    });

    test('422 (same key, different body) and 400 are not retried', T, async () => {
      const customer = `cus_422_${rand()}`;
      const key = `order-${rand()}`;
      const proxy = await startRecordingProxy({ upstream: server.url });
      try {
        const client = new IdempotentClient({ headers: auth, baseDelayMs: 10, maxDelayMs: 20 });
        const init = charge(customer);
        const ok = await client.fetch(`${proxy.url}/v1/charges`, { ...init, headers: { ...init.headers, 'idempotency-key': key } });
        assert.equal(ok.status, 201, 'created');
        const other = charge(customer, 2999);
        const mismatch = await client.fetch(`${proxy.url}/v1/charges`, { ...other, headers: { ...other.headers, 'idempotency-key': key } });
        assert.equal(mismatch.status, 422, 'key reused with another body');
        assert.match(await mismatch.text(), /idempotency-key-reused/);
        const invalid = await client.fetch(`${proxy.url}/v1/charges`, charge(customer, -5));
        assert.equal(invalid.status, 400, 'invalid amount');
        assert.deepEqual(
          proxy.seen.map((s) => s.status),
          [201, 422, 400],
          'one request each: nothing retried',
        );
        assert.equal((await pspCharges(server.url, customer)).length, 1, 'one PSP charge');
      } finally {
        await proxy.close();
      }
    });
  });
}
