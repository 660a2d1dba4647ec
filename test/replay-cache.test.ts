/**
 * The replay cache (protocol.md K20): a retry of a finished key answered from this process's
 * memory with zero store round trips (counted on real PostgreSQL), mismatches still 422 from
 * the cached fingerprint, never served past retention by the database clock (also across a
 * wall-clock step of the process), bounded in bytes (LRU), sealed responses only when asked,
 * scopes apart, over every kind of store.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { InvalidOptionError } from '../src/core/errors.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { ENTRY_OVERHEAD_BYTES, ReplayCache } from '../src/engine/replay-cache.js';
import type { IdempotencyTelemetry } from '../src/engine/telemetry.js';
import { HttpIdempotency } from '../src/http/idempotency.js';
import { MemoryStore } from '../src/memory/index.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { IdempotencyStore, KeyRecord, StoredResponse } from '../src/store/types.js';
import { tableName } from './helpers/engines.js';
import { requestInit } from './helpers/http.js';
import { memoryRealClockFactory, storeFactories, type StoreBackend, type StoreFactory } from './helpers/stores.js';
import { sleep } from './helpers/wait.js';

const FP1 = new Uint8Array(32).fill(1);
const FP2 = new Uint8Array(32).fill(2);
const response = (text = '{"id":"ch_1"}'): StoredResponse => ({
  status: 201,
  headers: [['content-type', 'application/json']],
  body: new TextEncoder().encode(text),
});
const decoder = new TextDecoder();

/** A finished record as a store would return it, with `remainingMs` of retention left. */
function doneRecord(scope: string, key: string, remainingMs: number, bodyBytes = 100): KeyRecord {
  return {
    scope,
    key,
    state: 'done',
    fingerprint: FP1,
    recoveryPoint: 'finished',
    phaseResults: {},
    token: 1,
    claimId: '00000000-0000-4000-8000-000000000000',
    leaseExpired: true,
    leaseRemainingMs: 0,
    createdAt: new Date(),
    response: { status: 200, headers: [], body: new Uint8Array(bodyBytes) },
    retentionRemainingMs: remainingMs,
  };
}

/** Claims `key`, finishes it with `stored`; returns the engine's begin of a retry. */
async function finishOnce(engine: IdempotencyEngine, scope: string, key: string, stored = response()) {
  const begun = await engine.begin({ scope, key, fingerprint: FP1 });
  assert.equal(begun.kind, 'execute');
  if (begun.kind === 'execute') await begun.execution.finish(stored);
}

describe('ReplayCache on its own', () => {
  it('evicts the least recently used entry to stay within maxBytes, and skips a response larger than the bound', () => {
    const size = ENTRY_OVERHEAD_BYTES + 2 * '1:sa'.length + 32 + 1000 + 2 * 36;
    const cache = new ReplayCache({ maxBytes: 3 * size + 10, marginMs: 0 });
    const now = performance.now();
    for (const key of ['a', 'b', 'c']) cache.fill(doneRecord('s', key, 60_000, 1000), now);
    assert.equal(cache.stats().entries, 3);
    assert.ok(cache.get('s', 'a'), 'a is held, and now the most recently used');
    cache.fill(doneRecord('s', 'd', 60_000, 1000), now);
    assert.equal(cache.get('s', 'b'), undefined, 'b, the least recently used, went');
    assert.ok(cache.get('s', 'a') && cache.get('s', 'c') && cache.get('s', 'd'));
    assert.equal(cache.stats().evictions, 1);
    assert.ok(cache.stats().bytes <= cache.maxBytes, `${cache.stats().bytes} <= ${cache.maxBytes}`);
    cache.fill(doneRecord('s', 'huge', 60_000, 4 * size), now);
    assert.equal(cache.get('s', 'huge'), undefined, 'larger than the whole bound: not cached');
    assert.equal(cache.stats().entries, 3, 'and nothing was evicted for it');
  });

  it('never keeps a record that is not done, has no retention left to bound it, or is sealed (unless sealed: true)', () => {
    const cache = new ReplayCache();
    const now = performance.now();
    cache.fill({ ...doneRecord('s', 'started', 60_000), state: 'started' }, now);
    const { retentionRemainingMs: _left, ...unbounded } = doneRecord('s', 'unbounded', 60_000);
    cache.fill(unbounded, now);
    cache.fill(doneRecord('s', 'short', 900), now); // less than the 1 s margin left
    cache.fill({ ...doneRecord('s', 'sealed', 60_000), sealed: true }, now);
    assert.equal(cache.stats().entries, 0);
    const sealedToo = new ReplayCache({ sealed: true });
    sealedToo.fill({ ...doneRecord('s', 'sealed', 60_000), sealed: true }, now);
    assert.ok(sealedToo.get('s', 'sealed'));
  });

  it("keeps bytes that own their memory (not views into a driver's shared buffer), and leaves the caller's record as it was", () => {
    const cache = new ReplayCache();
    const slab = new Uint8Array(8192);
    const record = doneRecord('s', 'view', 60_000);
    record.fingerprint = slab.subarray(0, 32);
    record.response!.body = slab.subarray(64, 564);
    cache.fill(record, performance.now());
    const kept = cache.get('s', 'view')!;
    assert.equal(kept.response!.body.buffer.byteLength, 500, 'the body was copied out of the slab');
    assert.equal(kept.fingerprint.buffer.byteLength, 32);
    assert.ok(Object.isFrozen(kept) && !Object.isFrozen(record), 'the cache froze its own copy only');
    assert.equal(record.response!.body.buffer, slab.buffer);
  });

  it('keeps two scopes apart, also where plain concatenation would join them', () => {
    const cache = new ReplayCache();
    const now = performance.now();
    cache.fill(doneRecord('ab', 'c', 60_000), now);
    assert.equal(cache.get('a', 'bc'), undefined);
    assert.equal(cache.get('abc', ''), undefined);
    assert.ok(cache.get('ab', 'c'));
  });

  it('rejects bad options, and serves one store with one retention', () => {
    assert.throws(() => new ReplayCache({ maxBytes: -1 }), InvalidOptionError);
    assert.throws(() => new ReplayCache({ maxBytes: 1.5 }), InvalidOptionError);
    assert.throws(() => new ReplayCache({ marginMs: Number.NaN }), InvalidOptionError);
    const replayCache = new ReplayCache();
    const store = new MemoryStore();
    new IdempotencyEngine({ store, replayCache });
    new IdempotencyEngine({ store, replayCache }); // the same store and retention: shared
    assert.throws(() => new IdempotencyEngine({ store: new MemoryStore(), replayCache }), InvalidOptionError);
    assert.throws(() => new IdempotencyEngine({ store, replayCache, retentionMs: 3_600_000 }), InvalidOptionError);
  });
});

describe('the replay cache in the engine', () => {
  it('answers a replay and a mismatch from memory, reports the hit to telemetry, and keeps scopes apart', async () => {
    const outcomes: Array<{ outcome: string; cached?: boolean | undefined }> = [];
    const telemetry: IdempotencyTelemetry = {
      request: () => ({
        claimed: () => undefined,
        outcome: (outcome, attributes) => void outcomes.push({ outcome, cached: attributes?.cached }),
        span: (_kind, _name, fn) => fn(),
        executing: () => undefined,
        end: () => undefined,
      }),
    };
    const engine = new IdempotencyEngine({ store: new MemoryStore(), replayCache: { maxBytes: 1 << 20 }, telemetry });
    await finishOnce(engine, 'tenant-1', 'k');
    const replay = await engine.begin({ scope: 'tenant-1', key: 'k', fingerprint: FP1 });
    assert.equal(replay.kind, 'replay');
    assert.equal(replay.kind === 'replay' && replay.cached, true, 'filled by its own finish');
    assert.equal(decoder.decode(replay.kind === 'replay' ? replay.response.body : undefined), '{"id":"ch_1"}');
    const mismatch = await engine.begin({ scope: 'tenant-1', key: 'k', fingerprint: FP2 });
    assert.equal(mismatch.kind, 'mismatch');
    assert.equal(mismatch.kind === 'mismatch' && mismatch.cached, true);
    assert.equal(mismatch.kind === 'mismatch' ? mismatch.record.response : 'x', undefined, 'a mismatch carries no response');
    const other = await engine.begin({ scope: 'tenant-2', key: 'k', fingerprint: FP1 });
    assert.equal(other.kind, 'execute', "another scope's key is its own");
    assert.deepEqual(outcomes.slice(1, 3), [
      { outcome: 'replayed', cached: true },
      { outcome: 'mismatch', cached: true },
    ]);
  });

  it('is off by default, and never caches a MemoryStore on an injected clock (not real time)', async () => {
    let now = 1_000_000;
    const cache = new ReplayCache();
    const engine = new IdempotencyEngine({ store: new MemoryStore({ clock: () => now }), replayCache: cache });
    await finishOnce(engine, 's', 'k');
    assert.equal((await engine.begin({ scope: 's', key: 'k', fingerprint: FP1 })).kind, 'replay');
    assert.equal(cache.stats().entries, 0);
    now += 25 * 3_600_000;
    assert.equal((await engine.begin({ scope: 's', key: 'k', fingerprint: FP1 })).kind, 'execute', 'past retention by the store clock: a new claim');
    assert.equal(new IdempotencyEngine({ store: new MemoryStore() }).replayCache, undefined);
  });
});

/** Over every kind of store (memory on its real clock, PostgreSQL, Redis): filled on read and on finish, then served with no store call. */
describe('the replay cache over every store', () => {
  const kinds: StoreFactory[] = [memoryRealClockFactory, ...storeFactories.filter((f) => !f.contractOnly && !f.capabilities.virtualTime)];
  for (const factory of kinds) {
    describe(factory.name, () => {
      let backend: StoreBackend;
      const drops: Array<() => Promise<void>> = [];
      before(async () => {
        backend = await factory.connect();
      });
      after(async () => {
        for (const drop of drops) await drop().catch(() => undefined);
        await backend.close();
      });
      it('serves a replay with no store call, after its own finish and after a read', async () => {
        const h = await backend.fresh();
        drops.push(() => h.drop());
        let calls = 0;
        const counted = new Proxy(h.store, {
          get(target, name, receiver) {
            const value = Reflect.get(target, name, receiver) as unknown;
            if (typeof value !== 'function') return value;
            return (...args: unknown[]) => {
              calls++;
              return (value as (...a: unknown[]) => unknown).apply(target, args);
            };
          },
        }) as IdempotencyStore;
        const cache = new ReplayCache();
        const engine = new IdempotencyEngine({ store: counted, replayCache: cache });
        await finishOnce(engine, 's', 'own');
        calls = 0;
        for (let i = 0; i < 3; i++) assert.equal((await engine.begin({ scope: 's', key: 'own', fingerprint: FP1 })).kind, 'replay');
        assert.equal(calls, 0, 'its own finish filled the cache');
        cache.clear();
        assert.equal((await engine.begin({ scope: 's', key: 'own', fingerprint: FP1 })).kind, 'replay');
        assert.equal(calls, 1, 'one read after a clear');
        assert.equal((await engine.begin({ scope: 's', key: 'own', fingerprint: FP2 })).kind, 'mismatch');
        assert.equal(calls, 1, 'that read filled it: the mismatch is decided from memory');
      });
    });
  }
});

/**
 * Calls `probe` every 20 ms until it returns a value, on the monotonic clock (the wall clock
 * may be faked); fails after `timeoutMs`.
 */
async function until<T>(probe: () => Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (performance.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}

const realNow = Date.now;
/** Moves this process's wall clock by `offsetMs` (0 restores it), as test/wall-clock.test.ts does. */
function stepWallClock(offsetMs: number): void {
  Date.now = offsetMs === 0 ? realNow : () => realNow.call(Date) + offsetMs;
}

describe('the replay cache on real PostgreSQL', { skip: process.env.DATABASE_URL ? false : 'needs DATABASE_URL (real PostgreSQL)' }, () => {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 });
  /** Statements sent to the server on any connection of `pool`. */
  let statements = 0;
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      statements++;
      return query(...args);
    };
  });
  const tables: string[] = [];
  after(async () => {
    stepWallClock(0);
    for (const table of tables) {
      await pool.query(`DROP TABLE IF EXISTS "${table}_blobs"`).catch(() => undefined);
      await pool.query(`DROP TABLE IF EXISTS "${table}"`).catch(() => undefined);
      await pool.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`).catch(() => undefined);
    }
    await pool.end();
  });
  async function table(options: { encryption?: { keys: Record<string, Buffer>; currentKeyId: string } } = {}) {
    const name = tableName();
    tables.push(name);
    const store = new PostgresStore({ client: pool, table: name, ...options });
    await store.migrate();
    return { store, name };
  }
  /** True when the database clock puts the key past `retentionMs`. */
  async function pastRetention(name: string, key: string, retentionMs: number): Promise<boolean> {
    const { rows } = await pool.query(`SELECT created_at <= now() - $2::int8 * interval '1 millisecond' AS past FROM "${name}" WHERE key = $1`, [
      key,
      retentionMs,
    ]);
    return rows[0]?.past === true;
  }

  it('HTTP: a replay costs zero statements; a mismatch is a 422 from memory, the row untouched', async () => {
    const { store, name } = await table();
    const http = new HttpIdempotency({ store, replayCache: new ReplayCache() });
    let runs = 0;
    const handler = async () => {
      runs++;
      return new Response(JSON.stringify({ id: 'ch_1', at: Math.random() }), { status: 201, headers: { 'content-type': 'application/json' } });
    };
    const send = (json: unknown) => http.handle(new Request('http://x/v1/charges', requestInit({ key: 'k-http', json })), handler);
    const first = await (await send({ amount: 1 })).text();
    const row = (await pool.query(`SELECT * FROM "${name}"`)).rows[0];
    statements = 0;
    for (let i = 0; i < 5; i++) {
      const replay = await send({ amount: 1 });
      assert.equal(replay.status, 201);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(await replay.text(), first);
    }
    const mismatch = await send({ amount: 2 });
    assert.equal(mismatch.status, 422);
    await mismatch.arrayBuffer();
    assert.equal(statements, 0, 'no statement reached PostgreSQL');
    assert.equal(runs, 1);
    assert.deepEqual((await pool.query(`SELECT * FROM "${name}"`)).rows[0], row, 'the stored row is untouched');
  });

  /**
   * Retries `key` until the engine claims it anew, checking before each retry whether the
   * database holds it past retention: a cached replay then fails the test.
   * @returns how many retries the cache answered
   */
  async function retryUntilClaimed(engine: IdempotencyEngine, name: string, key: string, retentionMs: number): Promise<number> {
    let cachedReplays = 0;
    await until(
      async () => {
        const past = await pastRetention(name, key, retentionMs);
        const begun = await engine.begin({ scope: 's', key, fingerprint: FP1 });
        if (begun.kind === 'replay' && begun.cached) {
          cachedReplays++;
          assert.equal(past, false, 'a cached replay of a key the database holds past retention');
        }
        return begun.kind === 'execute' ? begun : undefined;
      },
      20_000,
      'the key to be claimed anew past retention',
    );
    return cachedReplays;
  }

  /** An engine whose cache holds `key` with 1.5 s of retention left by the database clock, filled from a read. */
  async function shortEntry(key: string, retentionMs: number) {
    const { store, name } = await table();
    const cache = new ReplayCache({ marginMs: 200 });
    const engine = new IdempotencyEngine({ store, replayCache: cache, retentionMs, leaseMs: 5000, heartbeatMs: 0 });
    await finishOnce(engine, 's', key);
    cache.clear();
    await pool.query(`UPDATE "${name}" SET created_at = now() - $1::int8 * interval '1 millisecond'`, [retentionMs - 1500]);
    assert.equal((await engine.begin({ scope: 's', key, fingerprint: FP1 })).kind, 'replay');
    assert.equal(cache.stats().entries, 1, 'filled from the read');
    return { engine, cache, name };
  }

  it('never serves a key past its retention by the database clock: an entry filled with little retention left', async () => {
    const { engine, name } = await shortEntry('short', 60_000);
    assert.ok((await retryUntilClaimed(engine, name, 'short', 60_000)) > 0, 'the entry was served while retention was left');
  });

  it('a wall-clock step back by 1 h does not extend an entry (the monotonic deadline), a jump forward past its lifetime ends it (the wall-clock deadline: a suspended host)', async (t) => {
    t.after(() => stepWallClock(0));
    const { engine, cache, name } = await shortEntry('step', 60_000);
    stepWallClock(-3_600_000);
    await retryUntilClaimed(engine, name, 'step', 60_000);
    stepWallClock(3_600_000);
    await finishOnce(engine, 's', 'step-forward');
    const forward = await engine.begin({ scope: 's', key: 'step-forward', fingerprint: FP1 });
    assert.equal(forward.kind === 'replay' && forward.cached, true, 'a step forward before the entry was kept changes nothing');
    assert.equal(cache.stats().entries, 1);
    // Kept, then the wall clock passes the entry's lifetime while the monotonic clock barely
    // moves, as after a suspend of the host: the entry ends, and the store is asked again.
    stepWallClock(3_600_000 + 120_000);
    const suspended = await engine.begin({ scope: 's', key: 'step-forward', fingerprint: FP1 });
    assert.equal(suspended.kind, 'replay');
    assert.equal(suspended.kind === 'replay' && suspended.cached === true, false, 'past its wall-clock deadline the entry is not served');
  });

  it('its own finish is bounded by the claim: a short retention ends the entry before the row can be replaced', async () => {
    const retentionMs = 1500;
    const { store, name } = await table();
    const engine = new IdempotencyEngine({ store, replayCache: new ReplayCache({ marginMs: 200 }), retentionMs, leaseMs: 1000, heartbeatMs: 0 });
    await finishOnce(engine, 's', 'own');
    assert.ok((await retryUntilClaimed(engine, name, 'own', retentionMs)) > 0, 'the entry was served while retention was left');
  });

  it('does not cache sealed (encrypted) responses unless sealed: true', async () => {
    const encryption = { keys: { k1: randomBytes(32) }, currentKeyId: 'k1' };
    const { store } = await table({ encryption });
    for (const sealed of [false, true]) {
      const cache = new ReplayCache({ sealed });
      const engine = new IdempotencyEngine({ store, replayCache: cache });
      const key = `sealed-${sealed}`;
      await finishOnce(engine, 's', key);
      assert.equal(cache.stats().entries, sealed ? 1 : 0, 'own finish');
      cache.clear();
      statements = 0;
      const replay = await engine.begin({ scope: 's', key, fingerprint: FP1 });
      assert.equal(replay.kind, 'replay');
      assert.equal(decoder.decode(replay.kind === 'replay' ? replay.response.body : undefined), '{"id":"ch_1"}');
      assert.equal(cache.stats().entries, sealed ? 1 : 0, 'read');
      await engine.begin({ scope: 's', key, fingerprint: FP1 });
      assert.equal(statements, sealed ? 1 : 2, sealed ? 'the second replay from memory' : 'every replay reads the row');
    }
  });
});
