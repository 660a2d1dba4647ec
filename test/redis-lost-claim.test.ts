/**
 * RedisStore + PostgresPhases when Redis forgets a claim (a failover onto a replica that never
 * received it, a fresh Redis): the PostgreSQL ledger is the recovery point (protocol.md K22).
 * A phase that committed there is not run again by the next claim of the key, a finish that
 * committed there is replayed, and a worker of the forgotten claim can no longer commit, also
 * when the new Redis hands out a LOWER token than the forgotten one.
 *
 * "Redis forgets" is real: the key's hash and token counter are deleted on the Redis under test,
 * which is what a promoted replica without them holds.
 */
import { redisSkip, randomPrefix, dropPrefix } from './helpers/redis.js';
import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { engines, tableName } from './helpers/engines.js';
import { redisAndDatabase } from './helpers/redis-ledger.js';
import { PostgresPhases, RedisStore } from '../src/redis/index.js';
import { hashKey, tokenKey } from '../src/redis/keys.js';
import { IdempotencyEngine, type BeginResult } from '../src/engine/engine.js';
import type { Execution } from '../src/engine/execution.js';
import { LeaseLostError } from '../src/core/errors.js';
import type { Queryable } from '../src/postgres/client.js';
import type { StoredResponse } from '../src/store/types.js';

const fp = new Uint8Array(32).fill(3);
const otherFp = new Uint8Array(32).fill(4);
const RESPONSE: StoredResponse = { status: 201, headers: [['content-type', 'text/plain']], body: new Uint8Array([111, 107]) };

for (const engine of engines) {
  describe(`Redis forgets a claim, PostgresPhases remembers (${engine.name})`, { skip: redisSkip }, () => {
    const open = redisAndDatabase(engine);
    let table: string;
    let business: string;
    let prefix: string;
    let phases: PostgresPhases;
    /** An engine on its own store, as another process would have (lease 60 s: no takeover by expiry). */
    const worker = () => new IdempotencyEngine<Queryable>({ store: new RedisStore({ client: open.redis.client, prefix, phases }), leaseMs: 60_000 });
    const q = (sql: string, params?: unknown[]) => (open.db.client as Queryable).query(sql, params);
    beforeEach(async () => {
      table = tableName('idem_lost_phases');
      business = `${table}_charges`;
      prefix = randomPrefix();
      phases = new PostgresPhases({ client: open.db.client, table });
      await phases.migrate();
      await q(`CREATE TABLE "${business}" (key text NOT NULL, note text NOT NULL)`);
    });
    afterEach(async () => {
      await q(`DROP TABLE IF EXISTS "${business}"`);
      await q(`DROP TABLE IF EXISTS "${table}"`);
      await dropPrefix(open.redis, prefix);
    });

    /** What a failover onto a replica that never got the key leaves: no hash, no token counter. */
    const forget = async (key: string) => {
      const h = hashKey(prefix, 's', key);
      await open.redis.raw(h, ['DEL', h, tokenKey(h)]);
    };
    const charges = async (key: string) =>
      (await q(`SELECT note FROM "${business}" WHERE key = $1 ORDER BY note`, [key])).rows.map((r) => String((r as { note: unknown }).note));
    const charge = (exec: Execution<Queryable>, key: string, note: string, phase = 'charge') =>
      exec.phase(phase, async (tx) => {
        await tx.query(`INSERT INTO "${business}" (key, note) VALUES ($1, $2)`, [key, note]);
        return note;
      });
    const execute = (begun: BeginResult<Queryable>) => {
      assert.equal(begun.kind, 'execute', `expected to execute, got ${begun.kind}`);
      return (begun as { execution: Execution<Queryable> }).execution;
    };

    it('a phase committed in PostgreSQL is not run again by a new claim after Redis forgot the key', async () => {
      const first = execute(await worker().begin({ scope: 's', key: 'k', fingerprint: fp }));
      await charge(first, 'k', 'by-first');
      // The process dies before it finishes; the failover loses the claim.
      await forget('k');
      const second = execute(await worker().begin({ scope: 's', key: 'k', fingerprint: fp }));
      assert.equal(second.completed('charge'), true, 'the retry resumes after the committed phase');
      assert.equal(second.derivedKey('psp'), first.derivedKey('psp'), 'same claim id: an external call gets the same derived key');
      assert.equal(await charge(second, 'k', 'by-second'), 'by-first', 'the phase is skipped, its recorded result returned');
      await second.finish(RESPONSE);
      assert.deepEqual(await charges('k'), ['by-first'], 'one business row');
      const replay = await worker().begin({ scope: 's', key: 'k', fingerprint: fp });
      assert.equal(replay.kind, 'replay');
    });

    it('an adopted claim is taken over as released: its ended lease is not counted as a crash (protocol.md K22, K23)', async () => {
      const first = execute(await worker().begin({ scope: 's', key: 'k', fingerprint: fp }));
      await charge(first, 'k', 'by-first');
      await forget('k');
      // The fresh claim adopts the ledger's claim (its lease ended at once) and takes it over:
      // nothing crashed, so nothing counts toward maxAttempts.
      const second = execute(await worker().begin({ scope: 's', key: 'k', fingerprint: fp }));
      assert.equal(second.completed('charge'), true);
      assert.equal(second.failedAttempts, 0, 'the takeover of an adopted claim counts no failed attempt');
      const h = hashKey(prefix, 's', 'k');
      assert.equal(await open.redis.raw(h, ['HGET', h, 'rl']), null, 'the takeover cleared the released mark');
      await second.finish(RESPONSE);
      assert.deepEqual(await charges('k'), ['by-first']);
    });

    it('a finish committed in PostgreSQL is replayed after Redis forgot the key, not run again', async () => {
      const first = execute(await worker().begin({ scope: 's', key: 'k', fingerprint: fp }));
      await charge(first, 'k', 'by-first');
      await first.finish(RESPONSE);
      await forget('k');
      const retry = await worker().begin({ scope: 's', key: 'k', fingerprint: fp });
      assert.equal(retry.kind, 'replay', `got ${retry.kind}`);
      assert.deepEqual((retry as { response: StoredResponse }).response, RESPONSE);
      assert.deepEqual(await charges('k'), ['by-first']);
    });

    it('another request with the key after Redis forgot it is a mismatch, not a second execution', async () => {
      const first = execute(await worker().begin({ scope: 's', key: 'k', fingerprint: fp }));
      await charge(first, 'k', 'by-first');
      await forget('k');
      const other = await worker().begin({ scope: 's', key: 'k', fingerprint: otherFp });
      assert.equal(other.kind, 'mismatch', `got ${other.kind}`);
      const same = execute(await worker().begin({ scope: 's', key: 'k', fingerprint: fp }));
      assert.equal(same.completed('charge'), true);
      assert.deepEqual(await charges('k'), ['by-first']);
    });

    it('a takeover of a key whose Redis hash names another claim than the ledger resumes the ledger claim', async () => {
      // A promoted replica may hold an older state of the key than the ledger: here its claim id.
      const first = execute(await worker().begin({ scope: 's', key: 'k', fingerprint: fp }));
      await charge(first, 'k', 'by-first');
      const h = hashKey(prefix, 's', 'k');
      await open.redis.raw(h, ['HSET', h, 'cid', '00000000-0000-4000-8000-00000000beef', 'rp', 'start', 'lu', '0']);
      await open.redis.raw(h, ['HDEL', h, 'p:charge']);
      const second = execute(await worker().begin({ scope: 's', key: 'k', fingerprint: fp }));
      assert.equal(second.completed('charge'), true);
      assert.equal(second.derivedKey('psp'), first.derivedKey('psp'));
      await charge(second, 'k', 'by-second');
      await second.finish(RESPONSE);
      assert.deepEqual(await charges('k'), ['by-first']);
    });

    it('a stale worker of the forgotten claim cannot commit, even when the new Redis counts from a LOWER token', async () => {
      // The first primary's tokens run far ahead (its clock was ahead, or its counter was raised):
      // the promoted replica starts the key's counter from its own clock, lower.
      const h = hashKey(prefix, 's', 'k');
      await open.redis.raw(h, ['SET', tokenKey(h), String(Date.now() * 1000 + 3_600_000_000_000)]);
      const token = async () => Number(await open.redis.raw(h, ['HGET', h, 'tok']));
      const stale = execute(await worker().begin({ scope: 's', key: 'k', fingerprint: fp }));
      await charge(stale, 'k', 'a-by-stale', 'a');
      const staleToken = await token();
      await forget('k');
      const fresh = execute(await worker().begin({ scope: 's', key: 'k', fingerprint: fp }));
      assert.ok((await token()) < staleToken, 'the new token is lower than the forgotten one');
      assert.equal(fresh.completed('a'), true);
      // The stale worker wakes up and runs its next phase: refused, its row rolled back.
      await assert.rejects(charge(stale, 'k', 'b-by-stale', 'b'), LeaseLostError);
      await charge(fresh, 'k', 'b-by-fresh', 'b');
      await fresh.finish(RESPONSE);
      assert.deepEqual(await charges('k'), ['a-by-stale', 'b-by-fresh']);
    });

    it('a lower token that does not own the key in Redis cannot take the ledger', async () => {
      const ref = { scope: 's', key: 'x', token: 1000 };
      const claim = { claimId: '00000000-0000-4000-8000-000000000001', fingerprint: 'ab' };
      assert.notEqual(await phases.fence(ref, claim), 'fenced');
      const lower = { ...ref, token: 10 };
      assert.equal(await phases.fence(lower, { ...claim, owns: async () => false }), 'fenced', 'not the owner in Redis');
      assert.equal(await phases.fence(lower, claim), 'fenced', 'no owns(): never lowered');
      const rec = () => ({ kind: 'phase' as const, phase: 'a', result: null, leaseMs: 0 });
      assert.equal((await phases.commit(ref, rec)).kind, 'ok', 'the holder still commits');
      assert.notEqual(await phases.fence(lower, { ...claim, owns: async () => true }), 'fenced', 'the owner in Redis supersedes');
      assert.equal((await phases.commit(ref, rec)).kind, 'fenced', 'the superseded token cannot commit');
      assert.equal((await phases.commit(lower, rec)).kind, 'ok');
    });
  });
}
