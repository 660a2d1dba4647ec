/**
 * RedisStore with PostgresPhases: claims, leases and replays in Redis, each phase's effects and
 * recorded result in one PostgreSQL (or PGlite) transaction fenced by the Redis token.
 */
import { redisSkip } from './helpers/redis.js';
import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { engines, tableName } from './helpers/engines.js';
import { redisAndDatabase } from './helpers/redis-ledger.js';
import { randomPrefix, dropPrefix } from './helpers/redis.js';
import { PostgresPhases, RedisStore } from '../src/redis/index.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import type { Queryable } from '../src/postgres/client.js';
import type { CommitRecord, StoredResponse } from '../src/store/types.js';

const fp = new Uint8Array(32).fill(1);
const RESPONSE: StoredResponse = { status: 201, headers: [['content-type', 'text/plain']], body: new Uint8Array([104, 105]) };
/** A phase record; lease 0 ms so the worker's lease stays over and a takeover can happen right after. */
const phase =
  (name: string, leaseMs = 0) =>
  (value: unknown): CommitRecord => ({ kind: 'phase', phase: name, result: value, leaseMs });

for (const engine of engines) {
  describe(`RedisStore + PostgresPhases on ${engine.name}`, { skip: redisSkip }, () => {
    const open = redisAndDatabase(engine);
    let table: string;
    let side: string;
    let prefix: string;
    let store: RedisStore<Queryable>;
    beforeEach(async () => {
      table = tableName('idem_phases');
      side = `${table}_side`;
      prefix = randomPrefix();
      const phases = new PostgresPhases({ client: open.db.client, table });
      await phases.migrate();
      await (open.db.client as Queryable).query(`CREATE TABLE "${side}" (note text NOT NULL)`);
      store = new RedisStore({ client: open.redis.client, prefix, phases });
    });
    afterEach(async () => {
      await (open.db.client as Queryable).query(`DROP TABLE IF EXISTS "${side}"`);
      await (open.db.client as Queryable).query(`DROP TABLE IF EXISTS "${table}"`);
      await dropPrefix(open.redis, prefix);
    });
    const notes = async () => (await (open.db.client as Queryable).query(`SELECT note FROM "${side}" ORDER BY note`)).rows.map((r) => String(r.note));
    const insert = (note: string) => async (tx: Queryable) => {
      await tx.query(`INSERT INTO "${side}" (note) VALUES ($1)`, [note]);
      return note;
    };
    const claim = async (key: string, leaseMs = 60_000) => {
      const r = await store.claim({ scope: 's', key, fingerprint: fp, leaseMs, retentionMs: 600_000 });
      assert.equal(r.kind, 'claimed');
      return { scope: 's', key, token: (r as { token: number }).token };
    };

    it('commits a phase with its effects in one transaction; a stale worker is fenced and its effects rolled back', async () => {
      const ref = await claim('k', 0);
      assert.deepEqual(await store.commit(ref, phase('a'), insert('a-by-first')), { kind: 'ok', value: 'a-by-first' });
      const taken = await store.takeOver(ref, 60_000);
      assert.equal(taken.kind, 'taken');
      assert.equal((taken as { recoveryPoint: string }).recoveryPoint, 'a');
      assert.deepEqual((taken as { phaseResults: unknown }).phaseResults, { a: 'a-by-first' });
      // The first worker wakes up and commits its next phase: refused, effects rolled back.
      assert.deepEqual(await store.commit(ref, phase('b'), insert('b-by-stale')), { kind: 'fenced' });
      const ref2 = { ...ref, token: (taken as { token: number }).token };
      assert.deepEqual(await store.commit(ref2, phase('b'), insert('b-by-second')), { kind: 'ok', value: 'b-by-second' });
      assert.deepEqual(await store.commit(ref2, () => ({ kind: 'finish', response: RESPONSE }), insert('finish')), { kind: 'ok', value: 'finish' });
      assert.deepEqual(await notes(), ['a-by-first', 'b-by-second', 'finish']);
      const replay = await store.claim({ scope: 's', key: 'k', fingerprint: fp, leaseMs: 60_000, retentionMs: 600_000 });
      assert.deepEqual((replay as { record: { response: unknown } }).record.response, RESPONSE);
    });

    it('fences a stale commit that races the takeover: the phase lands before (seen) or is rolled back (never both)', async () => {
      for (let i = 0; i < 10; i++) {
        const ref = await claim(`r${i}`, 0);
        const [stale, taken] = await Promise.all([store.commit(ref, phase('a'), insert(`r${i}-stale`)), store.takeOver(ref, 60_000)]);
        assert.equal(taken.kind, 'taken');
        const seen = (taken as { recoveryPoint: string }).recoveryPoint === 'a';
        const committed = (await notes()).includes(`r${i}-stale`);
        assert.equal(stale.kind === 'ok', committed);
        assert.equal(seen, committed, `round ${i}: the takeover sees the phase exactly when it committed`);
      }
    });

    it('a finish committed in PostgreSQL but lost before Redis is replayed after the takeover', async () => {
      const ref = await claim('k', 0);
      // Commit the finish in the ledger only (as if the process died before the Redis write).
      const ledger = new PostgresPhases({ client: open.db.client, table });
      await ledger.commit(ref, () => ({ kind: 'finish', response: RESPONSE }), insert('charged'));
      const engine = new IdempotencyEngine({ store, leaseMs: 60_000 });
      const begun = await engine.begin({ scope: 's', key: 'k', fingerprint: fp });
      assert.equal(begun.kind, 'replay');
      assert.deepEqual((begun as { response: StoredResponse }).response, RESPONSE);
      assert.deepEqual(await notes(), ['charged'], 'the charge ran once');
    });
  });
}
