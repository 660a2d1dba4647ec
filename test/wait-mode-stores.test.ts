/**
 * Wait mode (protocol.md K17) on every store beside PostgreSQL (test/wait-mode.test.ts): the
 * memory store (in process), PGlite (its `listen`), Redis through node-redis, ioredis and
 * Valkey GLIDE, single and Cluster (sharded pub/sub from the scripts; a standalone GLIDE client
 * polls), MySQL/MariaDB, SQLite and D1 (polling). Each test would fail if the store sent no
 * notification: its waiters wait `inProgress.wait` (10 s) or a whole lease, far above the bounds
 * asserted here.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { pglite } from './helpers/pglite.js';
import pg from 'pg';
import { InvalidOptionError, StoreUnavailableError } from '../src/core/errors.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { withIdempotency } from '../src/lambda/index.js';
import { MemoryStore } from '../src/memory/index.js';
import { MySqlStore } from '../src/mysql/index.js';
import { SqliteStore, type SqliteDatabaseLike } from '../src/sqlite/index.js';
import { scratchFile } from './helpers/sqlite-stores.js';
import { D1Store } from '../src/cloudflare/index.js';
import { D1_WORKER } from './helpers/d1-stores.js';
import { miniflareMissing, startMiniflare } from './helpers/durable-object-stores.js';

const NODE_SQLITE: string = 'node:sqlite';
import { openMySqlDatabase } from './helpers/mysql-stores.js';
import { releaseKey } from '../src/operator/index.js';
import { PostgresStore } from '../src/postgres/index.js';
import { RedisStore } from '../src/redis/index.js';
import { IN_PROCESS, KeyChangeHub, waitRefusal } from '../src/store/key-changes.js';
import type { IdempotencyStore } from '../src/store/types.js';
import { tableName } from './helpers/engines.js';
import { fixture, lambdaContext } from './helpers/harness-lambda.js';
import { deferred } from './helpers/http.js';
import { clusterClients, glideCluster, glideSingle, randomPrefix, singleClients, startCluster, type TestCluster, type TestClient } from './helpers/redis.js';
import { startOwnRedis } from './helpers/redis-server.js';
import { fullMatrixOnly, needs } from './helpers/services.js';
import { sleep } from './helpers/wait.js';

const fp = (text: string) => createHash('sha256').update(text).digest();
const body = (text: string) => new TextEncoder().encode(text);
const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

function pct(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length - 1) * p))]!;
}

interface Opened {
  store: IdempotencyStore;
  close(): Promise<void>;
}

/** 32 duplicates of one key at once: the handler runs once, the 31 others replay its response, woken right after its finish. */
async function thirtyTwo(store: IdempotencyStore, name: string, diagnostic: (s: string) => void) {
  const eng = new IdempotencyEngine({ store, inProgress: { wait: 10_000 }, leaseMs: 30_000 });
  // Warm up: one wait opens the store's subscriber, so the race below measures the wake-up.
  const warm = `warm-${Math.random().toString(36).slice(2)}`;
  const held = await eng.begin({ scope: 's', key: warm, fingerprint: fp('w') });
  const warmWaiter = eng.begin({ scope: 's', key: warm, fingerprint: fp('w') });
  await sleep(100);
  if (held.kind === 'execute') await held.execution.finish(async () => ({ status: 200, headers: [], body: body('w') }));
  assert.equal((await warmWaiter).kind, 'replay');
  const key = `race-${Math.random().toString(36).slice(2)}`;
  let runs = 0;
  let finishedAt = 0;
  const answers = await Promise.all(
    Array.from({ length: 32 }, async () => {
      const begun = await eng.begin({ scope: 's', key, fingerprint: fp('a') });
      if (begun.kind === 'execute') {
        runs++;
        await sleep(200);
        await begun.execution.finish(async () => ({ status: 201, headers: [], body: body('{"id":"ch_1"}') }));
        finishedAt = performance.now();
        return { winner: true, at: finishedAt };
      }
      assert.equal(begun.kind, 'replay', `${name}: every loser replays (got ${begun.kind})`);
      assert.equal(begun.kind === 'replay' && text(begun.response.body), '{"id":"ch_1"}');
      return { winner: false, at: performance.now() };
    }),
  );
  assert.equal(runs, 1, 'the handler ran once');
  const losers = answers.filter((a) => !a.winner).map((a) => a.at - finishedAt);
  assert.equal(losers.length, 31);
  diagnostic(`${name}: losers answered p50 ${pct(losers, 0.5).toFixed(1)} ms, p99 ${pct(losers, 0.99).toFixed(1)} ms after the winner's finish`);
  // Without a notification they would answer 10 s later (the wait's end).
  assert.ok(pct(losers, 0.99) < 2000, `losers p99 ${pct(losers, 0.99).toFixed(1)} ms after the finish`);
}

/**
 * The first worker crashes (its lease runs out, nothing is sent); one waiter takes over and
 * finishes; the takeover and the finish wake the others, which replay its response.
 */
async function crashedWinner(store: IdempotencyStore) {
  const crashing = new IdempotencyEngine({ store, leaseMs: 800, heartbeatMs: 0 });
  const key = `crash-${Math.random().toString(36).slice(2)}`;
  const first = await crashing.begin({ scope: 's', key, fingerprint: fp('a') });
  assert.equal(first.kind, 'execute'); // and never finishes: the process "died"
  const eng = new IdempotencyEngine({ store, inProgress: { wait: 10_000 }, leaseMs: 30_000 });
  const started = performance.now();
  let runs = 0;
  const answers = await Promise.all(
    Array.from({ length: 8 }, async () => {
      const begun = await eng.begin({ scope: 's', key, fingerprint: fp('a') });
      if (begun.kind === 'execute') {
        runs++;
        await sleep(200);
        await begun.execution.finish(async () => ({ status: 201, headers: [], body: body('after-crash') }));
        return 'ran';
      }
      return begun.kind === 'replay' ? text(begun.response.body) : begun.kind;
    }),
  );
  const ms = performance.now() - started;
  assert.equal(runs, 1, 'one waiter took over');
  assert.deepEqual(
    answers.filter((a) => a !== 'ran'),
    Array(7).fill('after-crash'),
    'the others replayed the new worker result',
  );
  // Without notifications the 7 others would answer 409 at their wait's end (10 s).
  assert.ok(ms < 5000, `all answered after ${ms.toFixed(0)} ms`);
}

/**
 * protocol.md K40: an operator's forced release of a held key wakes its waiter at once, which
 * takes the key over, instead of reading it at its wait's end (10 s).
 */
async function operatorRelease(store: IdempotencyStore) {
  const eng = new IdempotencyEngine({ store, inProgress: { wait: 10_000 }, leaseMs: 30_000, heartbeatMs: 0 });
  const key = `op-${Math.random().toString(36).slice(2)}`;
  const held = await eng.begin({ scope: 's', key, fingerprint: fp('a') });
  assert.equal(held.kind, 'execute'); // a hung worker: its lease is valid for 30 s
  // Released only once the waiter waits for a change (not before its read after subscribing).
  const waiting = deferred();
  const subscribe = store.subscribe!.bind(store);
  const waitingStore: IdempotencyStore = Object.create(store);
  waitingStore.subscribe = async (scope, k) => {
    const changes = await subscribe(scope, k);
    const next = changes.next.bind(changes);
    changes.next = (ms, signal) => {
      waiting.resolve();
      return next(ms, signal);
    };
    return changes;
  };
  const waiter = new IdempotencyEngine({ store: waitingStore, inProgress: { wait: 10_000 }, leaseMs: 30_000 }).begin({ scope: 's', key, fingerprint: fp('a') });
  await waiting.promise;
  const started = performance.now();
  const released = await releaseKey(store, 's', key, { force: true, by: 'test' });
  assert.equal(released.done, true, released.message);
  const got = await waiter;
  const ms = performance.now() - started;
  assert.equal(got.kind, 'execute', 'the waiter took the released key over');
  if (got.kind === 'execute') await got.execution.finish(async () => ({ status: 200, headers: [], body: body('after-release') }));
  assert.ok(ms < 5000, `the waiter answered ${ms.toFixed(0)} ms after the release`);
}

function storeSuite(name: string, open: () => Promise<Opened>, skip: string | false = false) {
  describe(`wait mode on ${name} (protocol.md K17)`, { skip }, () => {
    let opened: Opened;
    before(async () => {
      opened = await open();
    });
    after(async () => opened?.close());
    test('32 concurrent duplicates: the handler once, every loser gets its response right after the finish', (t) =>
      thirtyTwo(opened.store, name, (s) => t.diagnostic(s)));
    test('a winner that crashes: one waiter takes over, the others see the takeover and replay its result', () => crashedWinner(opened.store));
    test('an operator release wakes the waiter at once (protocol.md K40)', () => operatorRelease(opened.store));
  });
}

storeSuite('MemoryStore', async () => ({ store: new MemoryStore(), close: async () => undefined }));

storeSuite('PGlite (notify: true, its listen)', async () => {
  const db = pglite();
  await db.waitReady;
  const store = new PostgresStore({ client: db, table: tableName('idem_wait'), notify: true });
  await store.migrate();
  return { store, close: () => db.close() };
});

// The mode Citus uses (the notification as its own statement on the coordinator after the
// change), checked here on PGlite and on PostgreSQL: no Citus server runs in these tiers.
storeSuite("PGlite (notify: 'after-commit', the Citus path)", async () => {
  const db = pglite();
  await db.waitReady;
  const store = new PostgresStore({ client: db, table: tableName('idem_wait'), notify: 'after-commit' });
  await store.migrate();
  return { store, close: () => db.close() };
});

storeSuite(
  "PostgreSQL (notify: 'after-commit', the Citus path)",
  async () => {
    const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 20 });
    const table = tableName('idem_wait');
    const store = new PostgresStore({ client: pool, table, notify: 'after-commit' });
    await store.migrate();
    return {
      store,
      close: async () => {
        await pool.query(`DROP TABLE IF EXISTS "${table}" CASCADE`);
        await pool.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
        await pool.end();
      },
    };
  },
  needs('DATABASE_URL'),
);

// MySQL and MariaDB cannot notify: the store polls each waited-for key (src/mysql/wait.ts).
storeSuite(
  'MySqlStore (polling)',
  async () => {
    const db = await openMySqlDatabase();
    const store = new MySqlStore({ client: db.pool, table: tableName('idem_wait') });
    await store.migrate();
    return { store, close: () => db.close() };
  },
  needs('MYSQL_URL'),
);

// SQLite cannot notify either: the same poll, on a file (protocol.md K51).
storeSuite('SqliteStore (polling, node:sqlite)', async () => {
  const scratch = scratchFile();
  const { DatabaseSync } = (await import(NODE_SQLITE)) as { DatabaseSync: new (file: string) => SqliteDatabaseLike & { close(): void } };
  const db = new DatabaseSync(scratch.file);
  const store = new SqliteStore({ client: db });
  await store.migrate();
  return {
    store,
    close: async () => {
      db.close();
      scratch.remove();
    },
  };
});

// D1 cannot notify: the same poll, through Miniflare's D1 binding (protocol.md K57).
storeSuite(
  'D1Store (polling, Miniflare)',
  async () => {
    const mf = await startMiniflare(D1_WORKER, {}, { d1Databases: ['DB'] });
    const store = new D1Store({ database: await mf.getD1Database('DB'), table: tableName('idem_wait') });
    await store.migrate();
    return { store, close: () => mf.dispose() };
  },
  miniflareMissing(),
);

function redisOpen(open: () => Promise<TestClient>): () => Promise<Opened> {
  return async () => {
    const t = await open();
    return { store: new RedisStore({ client: t.client, prefix: randomPrefix() }), close: () => t.close() };
  };
}

for (const c of singleClients) storeSuite(`RedisStore, ${c.name}`, redisOpen(c.open), needs('REDIS_URL'));
// A standalone GlideClient has no sharded pub/sub: its store polls the waited-for key (protocol.md K55).
storeSuite(`RedisStore, ${glideSingle.name} (polling)`, redisOpen(glideSingle.open), needs('REDIS_URL'));

describe('wait mode on Redis Cluster (sharded pub/sub)', { skip: fullMatrixOnly() }, () => {
  let cluster: TestCluster | undefined;
  before(async () => {
    cluster = await startCluster();
  });
  after(async () => cluster?.stop());
  for (const name of ['node-redis cluster', 'ioredis cluster', 'Valkey GLIDE cluster']) {
    test(`${name}: 32 duplicates, and a crashed winner`, async (t) => {
      const c = [...clusterClients(cluster!), glideCluster(cluster!)].find((x) => x.name === name)!;
      const opened = await redisOpen(c.open)();
      try {
        await thirtyTwo(opened.store, `RedisStore, ${name}`, (s) => t.diagnostic(s));
        await crashedWinner(opened.store);
        await operatorRelease(opened.store);
      } finally {
        await opened.close();
      }
    });
  }
});

describe('wait mode on Redis: the subscriber connection is killed mid-wait', { skip: needs('REDIS_URL') }, () => {
  for (const c of singleClients) {
    test(`${c.name}: the waiters get the result the finish sent while their subscriber was away`, async () => {
      const own = await startOwnRedis();
      const t = await (c.name === 'node-redis'
        ? (async () => {
            const { createClient } = await import('@redis/client');
            const client = createClient({ url: `redis://127.0.0.1:${own.port}` });
            await client.connect();
            return { client, raw: (args: string[]) => client.sendCommand(args), close: async () => void client.destroy() };
          })()
        : (async () => {
            const { Redis } = await import('ioredis');
            const client = new Redis(own.port, '127.0.0.1', { maxRetriesPerRequest: 1 });
            return { client, raw: (args: string[]) => client.call(args[0]!, ...args.slice(1)), close: async () => void client.disconnect() };
          })());
      try {
        const store = new RedisStore({ client: t.client, prefix: randomPrefix() });
        const eng = new IdempotencyEngine({ store, inProgress: { wait: 10_000 }, leaseMs: 30_000 });
        const first = await eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') });
        assert.equal(first.kind, 'execute');
        const waiters = Array.from({ length: 4 }, () => eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') }));
        // Wait until they subscribed (the subscriber is the only pub/sub client of this server).
        for (let i = 0; ; i++) {
          const list = String(await t.raw(['CLIENT', 'LIST', 'TYPE', 'pubsub']));
          if (list.includes('ssub=1')) break;
          assert.ok(i < 400, 'the waiters subscribed');
          await sleep(25);
        }
        await t.raw(['CLIENT', 'KILL', 'TYPE', 'pubsub']);
        // The finish goes out while the subscriber reconnects: its message reaches no one.
        const started = performance.now();
        if (first.kind === 'execute') await first.execution.finish(async () => ({ status: 200, headers: [], body: body('done') }));
        const got = await Promise.all(waiters);
        const ms = performance.now() - started;
        assert.deepEqual(
          got.map((g) => (g.kind === 'replay' ? text(g.response.body) : g.kind)),
          Array(4).fill('done'),
        );
        // Woken by the resubscription, not by the 10 s deadline.
        assert.ok(ms < 5000, `answered ${ms.toFixed(0)} ms after the finish`);
      } finally {
        await t.close();
        await own.stop();
      }
    });
  }
});

describe('a waiter cannot hang (protocol.md K17)', () => {
  /** A MemoryStore whose notifications are all lost (a subscriber that never hears anything). */
  function deafStore() {
    const store = new MemoryStore();
    const deaf = new KeyChangeHub(IN_PROCESS);
    let reads = 0;
    const get = store.get.bind(store);
    store.get = (scope, key, retentionMs) => {
      reads++;
      return get(scope, key, retentionMs);
    };
    store.subscribe = (scope, key) => deaf.subscribe(scope, key);
    return { store, reads: () => reads };
  }

  test('a lost notification: one read at the wait deadline finds the finish and replays it', async () => {
    const { store, reads } = deafStore();
    const eng = new IdempotencyEngine({ store, inProgress: { wait: 400 }, leaseMs: 30_000 });
    const first = await eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') });
    const started = performance.now();
    const waiting = eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') });
    await sleep(50);
    if (first.kind === 'execute') await first.execution.finish(async () => ({ status: 200, headers: [], body: body('done') }));
    const got = await waiting;
    assert.equal(got.kind === 'replay' && text(got.response.body), 'done');
    assert.ok(performance.now() - started >= 390, 'answered at the deadline, not before');
    assert.equal(reads(), 2, 'a read after subscribing and one at the deadline: no polling');
  });

  test('a lost notification and no finish: 409 with Retry-After at the wait deadline', async () => {
    const { store } = deafStore();
    const eng = new IdempotencyEngine({ store, inProgress: { wait: 300 }, leaseMs: 30_000 });
    assert.equal((await eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') })).kind, 'execute');
    const started = performance.now();
    const got = await eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') });
    assert.equal(got.kind, 'in-progress');
    assert.ok(got.kind === 'in-progress' && got.retryAfterMs > 0);
    const ms = performance.now() - started;
    assert.ok(ms >= 290 && ms < 5000, `answered after ${ms.toFixed(0)} ms`);
  });

  test('a subscription that does not become active within storeTimeoutMs: StoreUnavailableError (503)', async () => {
    const store = new MemoryStore();
    const stuck = new KeyChangeHub({ watch: () => new Promise<void>(() => undefined), unwatch: () => undefined }, 200);
    store.subscribe = (scope, key) => stuck.subscribe(scope, key);
    const eng = new IdempotencyEngine({ store, inProgress: { wait: 10_000 }, leaseMs: 30_000 });
    assert.equal((await eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') })).kind, 'execute');
    const started = performance.now();
    await assert.rejects(eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') }), StoreUnavailableError);
    assert.ok(performance.now() - started < 5000);
  });

  test('waiters are bounded per process: past maxWaiters a duplicate gets 409 at once', async () => {
    const store = new MemoryStore();
    const eng = new IdempotencyEngine({ store, inProgress: { wait: 10_000, maxWaiters: 2 }, leaseMs: 30_000 });
    const first = await eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') });
    const waiting = [eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') }), eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') })];
    await sleep(20);
    const started = performance.now();
    const over = await eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') });
    assert.equal(over.kind, 'in-progress');
    assert.ok(performance.now() - started < 1000, 'at once');
    if (first.kind === 'execute') await first.execution.finish(async () => ({ status: 200, headers: [], body: body('done') }));
    for (const w of await Promise.all(waiting)) assert.equal(w.kind, 'replay');
    // The two places are free again.
    const again = await eng.begin({ scope: 's', key: 'k2', fingerprint: fp('a') });
    const w2 = eng.begin({ scope: 's', key: 'k2', fingerprint: fp('a') });
    await sleep(20);
    if (again.kind === 'execute') await again.execution.finish(async () => ({ status: 200, headers: [], body: body('2') }));
    assert.equal((await w2).kind, 'replay');
  });

  test('Lambda: a duplicate waits at most the invocation remaining time less waitMarginMs', async () => {
    const store = new MemoryStore();
    const entered = deferred();
    const hold = deferred();
    const handler = withIdempotency({ store, inProgress: { wait: 10_000 }, leaseMs: 30_000, waitMarginMs: 1000 }, async () => {
      entered.resolve();
      await hold.promise;
      return { statusCode: 201, body: 'ok' };
    });
    const first = handler(fixture('rest v1'), lambdaContext(30_000));
    await entered.promise;
    const started = performance.now();
    const second = (await handler(fixture('rest v1'), lambdaContext(1600))) as { statusCode: number; headers?: Record<string, string> };
    const ms = performance.now() - started;
    assert.equal(second.statusCode, 409);
    assert.ok(ms >= 500 && ms < 1500, `the duplicate answered after ${ms.toFixed(0)} ms, within its invocation's 1600 ms`);
    hold.resolve();
    assert.equal(((await first) as { statusCode: number }).statusCode, 201);
  });
});

describe('which stores can serve wait mode: decided in one place, waitRefusal (protocol.md K17)', () => {
  test('a store that does not declare notify is refused with its own reason; one that does waits, whatever its noSubscribe says', async () => {
    const mute = Object.assign(new MemoryStore(), { capabilities: { completion: true, operator: true } as const, noSubscribe: 'this feed is off' });
    const refusal = waitRefusal(mute);
    assert.match(refusal ?? '', /needs a store that can wake waiters \(subscribe\).*\(this feed is off\)/);
    assert.throws(
      () => new IdempotencyEngine({ store: mute, inProgress: { wait: 1000 } }),
      (error: Error) => error instanceof InvalidOptionError && error.message === refusal,
    );
    // MySQL and MariaDB cannot notify, and MySqlStore declares notify all the same: it polls.
    const mysql = await import('mysql2/promise');
    const { MySqlStore } = await import('../src/mysql/index.js');
    const pool = mysql.createPool({ uri: 'mysql://root@127.0.0.1:3306/test' }); // lazy: nothing connects here
    try {
      assert.equal(waitRefusal(new MySqlStore({ client: pool })), undefined);
    } finally {
      await pool.end();
    }
    const stale = Object.assign(new MemoryStore(), { noSubscribe: 'stale' });
    assert.equal(waitRefusal(stale), undefined);
    assert.equal(new IdempotencyEngine({ store: stale, inProgress: { wait: 1000 } }).waitMs, 1000);
    // A caller's own wait (BeginInput.waitMs, a queue consumer's) on a store that cannot wait: the 409 at once.
    const plain = Object.assign(new MemoryStore(), { capabilities: {} });
    assert.match(waitRefusal(plain) ?? '', /notify: true/);
    const eng = new IdempotencyEngine({ store: plain, leaseMs: 30_000 });
    assert.equal((await eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') })).kind, 'execute');
    assert.equal((await eng.begin({ scope: 's', key: 'k', fingerprint: fp('a'), waitMs: 10_000 })).kind, 'in-progress');
  });
});

/** 4 concurrent duplicates of one charge through `post`: one charge, 201 and the same body for all, 3 replays. */
async function fourDuplicateCharges(post: (init: RequestInit) => Promise<Response>): Promise<void> {
  const key = `guide-${Math.random().toString(36).slice(2)}`;
  const answers = await Promise.all(
    Array.from({ length: 4 }, async () => {
      const res = await post({ method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: '{"amount":1999}' });
      return { status: res.status, replayed: res.headers.get('idempotent-replayed'), body: await res.text() };
    }),
  );
  assert.deepEqual(
    answers.map((a) => a.status),
    [201, 201, 201, 201],
  );
  assert.equal(new Set(answers.map((a) => a.body)).size, 1, 'one charge, the same body for all');
  assert.equal(answers.filter((a) => a.replayed === 'true').length, 3);
}

describe('the Valkey GLIDE guide example (examples/valkey-glide/app.ts)', { skip: needs('REDIS_URL') }, () => {
  test('4 concurrent duplicates on a GlideClient (polling wait): the slow handler once, every one gets its 201 and body', async () => {
    const { createApp } = await import('../examples/valkey-glide/app.js');
    const url = new URL(process.env.REDIS_URL!);
    const { app, close } = await createApp(url.hostname, Number(url.port || 6379));
    try {
      await fourDuplicateCharges(async (init) => app.request('/v1/charges', init));
    } finally {
      close();
    }
  });
});

describe('the wait-mode guide example (examples/wait-mode/app.ts)', { skip: needs('REDIS_URL') }, () => {
  test('4 concurrent duplicates over HTTP: the slow handler once, every one gets its 201 and body', async () => {
    const { createApp } = await import('../examples/wait-mode/app.js');
    const { serve } = await import('@hono/node-server');
    const { app, close } = await createApp(process.env.REDIS_URL!);
    const server = await new Promise<import('node:http').Server>((resolve) => {
      const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s as import('node:http').Server)) as import('node:http').Server;
      s.keepAliveTimeout = 0;
    });
    try {
      const url = `http://127.0.0.1:${(server.address() as import('node:net').AddressInfo).port}/v1/charges`;
      await fourDuplicateCharges((init) => fetch(url, init));
    } finally {
      await new Promise((resolve) => server.close(resolve));
      await close();
    }
  });
});

describe('wait mode on Redis Cluster: the key slot migrates during a wait', { skip: fullMatrixOnly() }, () => {
  let cluster: TestCluster | undefined;
  before(async () => {
    cluster = await startCluster();
  });
  after(async () => cluster?.stop());
  for (const name of ['node-redis cluster', 'ioredis cluster', 'Valkey GLIDE cluster']) {
    test(`${name}: the subscription follows the slot, the finish on the new master wakes the waiters`, async (t) => {
      const c = [...clusterClients(cluster!), glideCluster(cluster!)].find((x) => x.name === name)!;
      const tc = await c.open();
      const { createClient } = await import('@redis/client');
      const admin = await Promise.all(
        cluster!.ports.map(async (port) => {
          const a = createClient({ url: `redis://127.0.0.1:${port}` });
          await a.connect();
          return { port, a };
        }),
      );
      try {
        const prefix = randomPrefix();
        const store = new RedisStore({ client: tc.client, prefix });
        const eng = new IdempotencyEngine({ store, inProgress: { wait: 8000 }, leaseMs: 30_000 });
        const first = await eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') });
        assert.equal(first.kind, 'execute');
        const waiters = Array.from({ length: 4 }, () => eng.begin({ scope: 's', key: 'k', fingerprint: fp('a') }));
        const h = `${prefix}:{s:k}`;
        // Move the key's slot to another master: MIGRATING / IMPORTING, MIGRATE its keys, SETSLOT NODE everywhere.
        const slot = Number(await admin[0]!.a.sendCommand(['CLUSTER', 'KEYSLOT', h]));
        const ids = await cluster!.nodeIds();
        const slots = (await admin[0]!.a.sendCommand(['CLUSTER', 'SLOTS'])) as Array<[number, number, [string, number]]>;
        const ownerPort = Number(slots.find(([from, to]) => slot >= from && slot <= to)![2][1]);
        const source = admin.find((x) => x.port === ownerPort)!;
        const target = admin.find((x) => x.port !== ownerPort)!;
        /** Resolves once `node` has a subscriber of the key's shard channel (the hash's name). */
        const subscribedOn = async (node: { a: { sendCommand(args: string[]): Promise<unknown> } }, what: string) => {
          for (let i = 0; ; i++) {
            const reply = (await node.a.sendCommand(['PUBSUB', 'SHARDNUMSUB', h])) as [string, number];
            if (Number(reply[1]) > 0) return;
            assert.ok(i < 800, what);
            await sleep(25);
          }
        };
        await subscribedOn(source, 'the waiters subscribed on the owner');
        await target.a.sendCommand(['CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', ids.get(source.port)!]);
        await source.a.sendCommand(['CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', ids.get(target.port)!]);
        const keys = (await source.a.sendCommand(['CLUSTER', 'GETKEYSINSLOT', String(slot), '100'])) as string[];
        if (keys.length > 0) await source.a.sendCommand(['MIGRATE', '127.0.0.1', String(target.port), '', '0', '5000', 'KEYS', ...keys]);
        // SETSLOT NODE in the order CLUSTER SETSLOT's documentation gives: the target, then the source
        // (which drops the slot's shard subscribers with SUNSUBSCRIBE; the driver re-reads the slot
        // map and subscribes on the new master), then the other masters, only once it has. Until
        // then a re-read answered by another master still shows the old map, and only the
        // subscriber's periodic re-read (ioredis, src/redis/subscriber.ts) finds the move. Each
        // node is told once: a second SETSLOT NODE on the new owner would drop its subscribers again.
        await target.a.sendCommand(['CLUSTER', 'SETSLOT', String(slot), 'NODE', ids.get(target.port)!]);
        await source.a.sendCommand(['CLUSTER', 'SETSLOT', String(slot), 'NODE', ids.get(target.port)!]);
        await subscribedOn(target, 'the subscription followed the slot to its new master');
        for (const x of admin) {
          if (x !== source && x !== target) await x.a.sendCommand(['CLUSTER', 'SETSLOT', String(slot), 'NODE', ids.get(target.port)!]);
        }
        const started = performance.now();
        if (first.kind === 'execute') await first.execution.finish(async () => ({ status: 200, headers: [], body: body('moved') }));
        const got = await Promise.all(waiters);
        const ms = performance.now() - started;
        t.diagnostic(`${name}: the waiters answered ${ms.toFixed(0)} ms after the finish on the slot's new master`);
        assert.deepEqual(
          got.map((g) => (g.kind === 'replay' ? text(g.response.body) : g.kind)),
          Array(4).fill('moved'),
        );
        // Woken by the message on the new master, not by their deadline read (8 s).
        assert.ok(ms < 4000, `answered ${ms.toFixed(0)} ms after the finish`);
      } finally {
        for (const x of admin) x.a.destroy();
        await tc.close();
      }
    });
  }
});
