/**
 * `replayFastPath: 'adaptive'` (the default, protocol.md K28): the replay fast path's `HGETALL`
 * is taken while at least half of the recent claims were replays, and skipped otherwise (a fresh
 * store, a stream of new keys). Both ways answer the same: a replay through the claim script still compares
 * the fingerprint (a mismatch carries no body) and never replays past retention. The commands
 * the store sends are counted on a wrapper of the client (node-redis and ioredis).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { RedisStore } from '../src/redis/index.js';
import { hashKey } from '../src/redis/keys.js';
import { InvalidOptionError } from '../src/core/errors.js';
import type { ClaimResult, StoredResponse } from '../src/store/types.js';
import { dropPrefix, randomPrefix, redisSkip, singleClients, type TestClient } from './helpers/redis.js';

const RETENTION_MS = 60_000;
const RESPONSE: StoredResponse = { status: 201, headers: [['content-type', 'application/json']], body: new Uint8Array([1, 2, 3, 250]) };
const fp = (n: number): Uint8Array => new Uint8Array(32).fill(n);
const record = (r: ClaimResult) => {
  assert.equal(r.kind, 'exists', JSON.stringify(r));
  return (r as Extract<ClaimResult, { kind: 'exists' }>).record;
};

/** The client with every command name it sends recorded in `sent`. */
function counting(client: unknown): { client: never; sent: string[] } {
  const sent: string[] = [];
  const name = (args: unknown[]) => String((args.find(Array.isArray) as unknown[] | undefined)?.[0] ?? args[0]).toUpperCase();
  const wrapped = new Proxy(client as object, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if ((prop === 'sendCommand' || prop === 'call') && typeof value === 'function')
        return (...args: unknown[]) => {
          sent.push(name(args));
          return (value as (...a: unknown[]) => unknown).apply(target, args);
        };
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return { client: wrapped as never, sent };
}

for (const c of singleClients) {
  describe(`RedisStore replayFastPath 'adaptive' on ${c.name}`, { skip: redisSkip }, () => {
    let t: TestClient;
    let prefix: string;
    before(async () => {
      t = await c.open();
      prefix = randomPrefix();
    });
    after(async () => {
      await dropPrefix(t, prefix);
      await t.close();
    });

    const open = (replayFastPath?: boolean | 'adaptive') => {
      const spy = counting(t.client);
      const store = new RedisStore({ client: spy.client, prefix, ...(replayFastPath === undefined ? {} : { replayFastPath }) });
      const claim = (key: string, n = 1) => store.claim({ scope: 's', key, fingerprint: fp(n), leaseMs: 60_000, retentionMs: RETENTION_MS });
      /** Claims and finishes `count` new keys named `<name>-<i>`. */
      const newKeys = async (name: string, count: number) => {
        for (let i = 0; i < count; i++) {
          const r = await claim(`${name}-${i}`);
          assert.equal(r.kind, 'claimed');
          const token = (r as { token: number }).token;
          assert.equal((await store.commit({ scope: 's', key: `${name}-${i}`, token }, () => ({ kind: 'finish', response: RESPONSE }))).kind, 'ok');
        }
      };
      /** The commands one call sent. */
      const commandsOf = async (run: () => Promise<ClaimResult>) => {
        spy.sent.length = 0;
        const result = await run();
        return { result, sent: [...spy.sent] };
      };
      return { store, claim, newKeys, commandsOf };
    };

    it('sends a new key straight to the claim script once new keys dominate (two commands a key: claim and finish)', async () => {
      const { claim, newKeys, commandsOf } = open();
      const first = await commandsOf(() => claim('a-first'));
      assert.deepEqual(first.sent, ['EVALSHA'], 'a fresh store claims first');
      // Replays make the fast path worth it; a stream of new keys ends it again.
      await newKeys('a', 2);
      for (let i = 0; i < 40; i++) record(await claim(`a-${i % 2}`));
      assert.ok((await commandsOf(() => claim('a-probe'))).sent.includes('HGETALL'), 'read first while replays dominate');
      await newKeys('a-new', 40);
      const next = await commandsOf(() => claim('a-next'));
      assert.equal(next.result.kind, 'claimed');
      assert.deepEqual(next.sent, ['EVALSHA'], 'no HGETALL before the claim script');
    });

    it('answers replays through the claim script the same: the body only to the same fingerprint, never past retention; then takes the fast path again', async () => {
      const { claim, newKeys, commandsOf } = open();
      await newKeys('b', 40);
      const replay = await commandsOf(() => claim('b-0'));
      assert.ok(!replay.sent.includes('HGETALL'), 'skipped while new keys dominate');
      const rec = record(replay.result);
      assert.equal(rec.state, 'done');
      assert.deepEqual(rec.response, RESPONSE);
      assert.ok(rec.retentionRemainingMs! > 0 && rec.retentionRemainingMs! <= RETENTION_MS);
      const mismatch = await commandsOf(() => claim('b-1', 2));
      assert.ok(!mismatch.sent.includes('HGETALL'));
      assert.equal(record(mismatch.result).response, undefined, 'a mismatch never carries the stored body');
      // Past retention (creation an hour back): claimed afresh, not replayed.
      const h = hashKey(prefix, 's', 'b-2');
      await t.raw(h, ['HINCRBY', h, 'ca', '-3600000']);
      assert.equal((await claim('b-2')).kind, 'claimed');
      // Retries of finished keys come back: the fast path with them.
      for (let i = 3; i < 40; i++) record(await claim(`b-${i}`));
      const back = await commandsOf(() => claim('b-0'));
      assert.deepEqual(record(back.result).response, RESPONSE);
      assert.ok(back.sent.includes('HGETALL') && !back.sent.includes('EVALSHA'), `replayed by the fast path again (${back.sent})`);
    });

    it('always reads first with replayFastPath: true, never with false, and refuses any other value', async () => {
      const always = open(true);
      await always.newKeys('c', 40);
      assert.ok((await always.commandsOf(() => always.claim('c-next'))).sent.includes('HGETALL'));
      const never = open(false);
      await never.newKeys('d', 2);
      const replay = await never.commandsOf(() => never.claim('d-0'));
      assert.deepEqual(replay.sent, ['EVALSHA']);
      assert.deepEqual(record(replay.result).response, RESPONSE);
      assert.throws(() => new RedisStore({ client: t.client as never, prefix, replayFastPath: 'yes' as never }), InvalidOptionError);
    });
  });
}
