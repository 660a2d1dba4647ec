/**
 * Contract of the PostgreSQL store, run against every engine in test/helpers/engines.ts:
 * PGlite always, real PostgreSQL when DATABASE_URL is set.
 */
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { engines, freshStore, tableName } from './helpers/engines.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { Queryable, SqlClient } from '../src/postgres/client.js';
import type { ClaimInput, ClaimResult, CommitRecord, KeyRef, StoredResponse } from '../src/store/types.js';
import { InvalidOptionError } from '../src/core/errors.js';

const LONG_LEASE_MS = 60_000;
const RETENTION_MS = 60_000;

const fp = (n: number): Uint8Array => new Uint8Array(32).fill(n);
const q = (client: SqlClient): Queryable => client as Queryable;

function claimInput(key: string, overrides: Partial<ClaimInput> = {}): ClaimInput {
  return { scope: 'tenant-1', key, fingerprint: fp(1), leaseMs: LONG_LEASE_MS, retentionMs: RETENTION_MS, ...overrides };
}

function claimedToken(result: ClaimResult): number {
  assert.equal(result.outcome, 'claimed', `expected a claim, got ${JSON.stringify(result)}`);
  return (result as { token: number }).token;
}

const phase = (name: string, leaseMs = LONG_LEASE_MS) => (value: unknown): CommitRecord => ({
  kind: 'phase',
  phase: name,
  result: value,
  leaseMs,
});
const finishWith = (response: StoredResponse) => (): CommitRecord => ({ kind: 'finish', response });

for (const engine of engines) {
  describe(`PostgresStore on ${engine.name}`, () => {
    let db: Awaited<ReturnType<typeof engine.open>>;
    let ctx: Awaited<ReturnType<typeof freshStore>>;
    let side: string;

    before(async () => {
      db = await engine.open();
    });
    after(async () => {
      await db.close();
    });
    beforeEach(async () => {
      ctx = await freshStore(db.client);
      side = `${ctx.table}_side`;
      await q(db.client).query(`CREATE TABLE "${side}" (id serial PRIMARY KEY, note text NOT NULL)`);
    });
    afterEach(async () => {
      await q(db.client).query(`DROP TABLE IF EXISTS "${side}"`);
      await ctx.drop();
    });

    const sideNotes = async (): Promise<string[]> =>
      (await q(db.client).query(`SELECT note FROM "${side}" ORDER BY id`)).rows.map((r) => String(r.note));
    const insertSide = (note: string) => async (tx: Queryable) => {
      await tx.query(`INSERT INTO "${side}" (note) VALUES ($1)`, [note]);
      return { note };
    };
    const rawRow = async (key: string) =>
      (await q(db.client).query(`SELECT * FROM "${ctx.table}" WHERE scope = 'tenant-1' AND key = $1`, [key])).rows[0];
    const rowCount = async () => Number((await q(db.client).query(`SELECT count(*)::int AS n FROM "${ctx.table}"`)).rows[0]!.n);
    /** Moves a row's creation time one hour into the past, i.e. past RETENTION_MS. */
    const age = async (key: string) => {
      await q(db.client).query(
        `UPDATE "${ctx.table}" SET created_at = created_at - interval '1 hour' WHERE scope = 'tenant-1' AND key = $1`,
        [key],
      );
    };
    /** Claims `key` with a lease that is already over, then takes it over: returns the new token (1). */
    const claimAndTakeOver = async (key: string): Promise<KeyRef> => {
      const token = claimedToken(await ctx.store.claim(claimInput(key, { leaseMs: 0 })));
      const taken = await ctx.store.takeOver({ scope: 'tenant-1', key, token }, LONG_LEASE_MS);
      assert.equal(taken.outcome, 'taken');
      return { scope: 'tenant-1', key, token: (taken as { token: number }).token };
    };

    describe('migrate', () => {
      it('can run twice on the same table', async () => {
        await ctx.store.migrate();
        await ctx.store.migrate();
        assert.equal(await rowCount(), 0);
      });

      it('survives several stores migrating one new table at once', async () => {
        const table = tableName();
        try {
          const stores = Array.from({ length: 5 }, () => new PostgresStore({ client: db.client, table }));
          await Promise.all(stores.map((s) => s.migrate()));
          assert.equal(claimedToken(await stores[0]!.claim(claimInput('k'))), 0);
        } finally {
          await q(db.client).query(`DROP TABLE IF EXISTS "${table}"`);
        }
      });

      it('rejects a table name that is not a plain identifier', () => {
        assert.throws(() => new PostgresStore({ client: db.client, table: 'keys; DROP TABLE x' }), InvalidOptionError);
        assert.throws(() => new PostgresStore({ client: db.client, table: 'a.b.c' }), InvalidOptionError);
      });
    });

    describe('claim', () => {
      it('claims a new key with token 0, then returns the existing record', async () => {
        const before = Date.now();
        assert.deepEqual(await ctx.store.claim(claimInput('k1')), { outcome: 'claimed', token: 0 });
        const again = await ctx.store.claim(claimInput('k1', { fingerprint: fp(2) }));
        assert.equal(again.outcome, 'exists');
        const record = (again as Extract<ClaimResult, { outcome: 'exists' }>).record;
        assert.equal(record.scope, 'tenant-1');
        assert.equal(record.key, 'k1');
        assert.equal(record.state, 'started');
        assert.deepEqual(Array.from(record.fingerprint), Array.from(fp(1)), 'the stored fingerprint is the first one');
        assert.equal(record.recoveryPoint, 'start');
        assert.deepEqual(record.phaseResults, {});
        assert.equal(record.token, 0);
        assert.equal(record.leaseExpired, false);
        assert.ok(record.leaseRemainingMs > 0 && record.leaseRemainingMs <= LONG_LEASE_MS, `${record.leaseRemainingMs}`);
        assert.equal(record.response, undefined);
        assert.ok(record.createdAt instanceof Date, 'record.createdAt instanceof Date');
        assert.ok(Math.abs(record.createdAt.getTime() - before) < 60_000, 'created_at is now, by the database clock');
        assert.equal(await rowCount(), 1);
      });

      it('keeps keys of different scopes apart', async () => {
        assert.equal(claimedToken(await ctx.store.claim(claimInput('k'))), 0);
        assert.equal(claimedToken(await ctx.store.claim(claimInput('k', { scope: 'tenant-2' }))), 0);
        assert.equal(await rowCount(), 2);
      });

      it('reports a lease of 0 ms as expired', async () => {
        await ctx.store.claim(claimInput('k', { leaseMs: 0 }));
        const again = await ctx.store.claim(claimInput('k'));
        assert.equal(again.outcome, 'exists');
        const record = (again as Extract<ClaimResult, { outcome: 'exists' }>).record;
        assert.equal(record.leaseExpired, true);
        assert.equal(record.leaseRemainingMs, 0);
      });

      it('treats a row past retention as absent: replaces it with a higher token', async () => {
        const old = claimedToken(await ctx.store.claim(claimInput('k')));
        await ctx.store.commit({ scope: 'tenant-1', key: 'k', token: old }, phase('p1'), insertSide('first'));
        await age('k');
        assert.equal(await ctx.store.get('tenant-1', 'k', RETENTION_MS), undefined, 'get ignores a row past retention');
        assert.equal(await rowCount(), 1, 'the row is still there before the claim');

        const fresh = claimedToken(await ctx.store.claim(claimInput('k', { fingerprint: fp(9) })));
        assert.ok(fresh > old, `new token ${fresh} must exceed old token ${old}`);
        const record = await ctx.store.get('tenant-1', 'k', RETENTION_MS);
        assert.ok(record, 'record');
        assert.equal(record.token, fresh);
        assert.equal(record.state, 'started');
        assert.equal(record.recoveryPoint, 'start');
        assert.deepEqual(record.phaseResults, {});
        assert.deepEqual(Array.from(record.fingerprint), Array.from(fp(9)));
        assert.ok(Date.now() - record.createdAt.getTime() < 30 * 60_000, 'created_at is reset');
        assert.equal(record.leaseExpired, false);

        // The worker holding the old row's token can no longer write.
        const stale = await ctx.store.commit({ scope: 'tenant-1', key: 'k', token: old }, phase('p2'));
        assert.deepEqual(stale, { outcome: 'fenced' });
      });

      it('replaces a finished row past retention, dropping its response', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        await ctx.store.commit({ scope: 'tenant-1', key: 'k', token }, finishWith({ status: 201, headers: [], body: new Uint8Array([1]) }));
        await age('k');
        assert.equal(claimedToken(await ctx.store.claim(claimInput('k'))), token + 1);
        const record = await ctx.store.get('tenant-1', 'k', RETENTION_MS);
        assert.equal(record?.state, 'started');
        assert.equal(record?.response, undefined);
        const raw = await rawRow('k');
        assert.equal(raw?.response_status, null);
        assert.equal(raw?.response_body, null);
      });

      it('lets exactly one of many concurrent claims replace a row past retention', async () => {
        await ctx.store.claim(claimInput('k'));
        await age('k');
        const results = await Promise.all(Array.from({ length: 20 }, () => ctx.store.claim(claimInput('k'))));
        const claimed = results.filter((r) => r.outcome === 'claimed');
        assert.equal(claimed.length, 1);
        assert.deepEqual(claimed[0], { outcome: 'claimed', token: 1 });
        for (const r of results.filter((r) => r.outcome === 'exists')) {
          assert.equal((r as Extract<ClaimResult, { outcome: 'exists' }>).record.token, 1);
        }
        assert.equal(await rowCount(), 1);
      });
    });

    describe('get', () => {
      it('returns undefined for an absent key', async () => {
        assert.equal(await ctx.store.get('tenant-1', 'nope', RETENTION_MS), undefined);
      });
    });

    describe('takeOver', () => {
      it('takes over an expired lease with the next token, keeping recovery point and results', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        await ctx.store.commit({ scope: 'tenant-1', key: 'k', token }, phase('p1', 0), async () => ({ id: 7 }));
        const taken = await ctx.store.takeOver({ scope: 'tenant-1', key: 'k', token }, LONG_LEASE_MS);
        assert.deepEqual(taken, { outcome: 'taken', token: 1, recoveryPoint: 'p1', phaseResults: { p1: { id: 7 } } });
        const record = await ctx.store.get('tenant-1', 'k', RETENTION_MS);
        assert.equal(record?.token, 1);
        assert.equal(record?.leaseExpired, false);
      });

      it('loses while the lease is still valid', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        assert.deepEqual(await ctx.store.takeOver({ scope: 'tenant-1', key: 'k', token }, LONG_LEASE_MS), { outcome: 'lost' });
        assert.equal((await ctx.store.get('tenant-1', 'k', RETENTION_MS))?.token, 0);
      });

      it('loses with a stale token even when the lease has expired', async () => {
        const ref = await claimAndTakeOver('k');
        await ctx.store.release(ref); // lease expired again, token 1
        assert.deepEqual(await ctx.store.takeOver({ ...ref, token: 0 }, LONG_LEASE_MS), { outcome: 'lost' });
        const taken = await ctx.store.takeOver(ref, LONG_LEASE_MS);
        assert.equal(taken.outcome, 'taken');
        assert.equal((taken as { token: number }).token, 2);
      });

      it('lets only one of two takeovers with the same token win', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k', { leaseMs: 0 })));
        const ref = { scope: 'tenant-1', key: 'k', token };
        const results = await Promise.all([ctx.store.takeOver(ref, LONG_LEASE_MS), ctx.store.takeOver(ref, LONG_LEASE_MS)]);
        assert.deepEqual(results.map((r) => r.outcome).sort(), ['lost', 'taken']);
      });

      it('never takes over a finished key', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        await ctx.store.commit({ scope: 'tenant-1', key: 'k', token }, finishWith({ status: 200, headers: [], body: new Uint8Array() }));
        assert.deepEqual(await ctx.store.takeOver({ scope: 'tenant-1', key: 'k', token }, LONG_LEASE_MS), { outcome: 'lost' });
      });

      it('loses on an absent key', async () => {
        assert.deepEqual(await ctx.store.takeOver({ scope: 'tenant-1', key: 'nope', token: 0 }, LONG_LEASE_MS), { outcome: 'lost' });
      });
    });

    describe('commit', () => {
      it('commits effects, recovery point and phase result together and renews the lease', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k', { leaseMs: 0 })));
        const ref = { scope: 'tenant-1', key: 'k', token };
        const first = await ctx.store.commit(ref, phase('order_created'), insertSide('order'));
        assert.deepEqual(first, { outcome: 'ok', value: { note: 'order' } });
        const second = await ctx.store.commit(ref, phase('psp_charged'), async () => ({ charge: 'ch_1', at: null }));
        assert.equal(second.outcome, 'ok');

        assert.deepEqual(await sideNotes(), ['order']);
        const record = await ctx.store.get('tenant-1', 'k', RETENTION_MS);
        assert.ok(record, 'record');
        assert.equal(record.recoveryPoint, 'psp_charged');
        assert.deepEqual(record.phaseResults, { order_created: { note: 'order' }, psp_charged: { charge: 'ch_1', at: null } });
        assert.equal(record.leaseExpired, false, 'the phase renewed the lease that was claimed already expired');
        assert.equal(record.state, 'started');
      });

      it('records a phase without effects', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        const result = await ctx.store.commit({ scope: 'tenant-1', key: 'k', token }, () => ({
          kind: 'phase',
          phase: 'p',
          result: { n: 1 },
          leaseMs: LONG_LEASE_MS,
        }));
        assert.deepEqual(result, { outcome: 'ok', value: undefined });
        assert.deepEqual((await ctx.store.get('tenant-1', 'k', RETENTION_MS))?.phaseResults, { p: { n: 1 } });
      });

      it('is fenced with a stale token and rolls back the effects', async () => {
        const ref = await claimAndTakeOver('k');
        const before = await rawRow('k');
        const result = await ctx.store.commit({ ...ref, token: 0 }, phase('p1'), insertSide('stale'));
        assert.deepEqual(result, { outcome: 'fenced' });
        assert.deepEqual(await sideNotes(), [], 'the stale worker’s insert was rolled back');
        assert.deepEqual(await rawRow('k'), before);
      });

      it('rolls back everything and rethrows when the effects throw', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        const ref = { scope: 'tenant-1', key: 'k', token };
        await ctx.store.commit(ref, phase('p1'), insertSide('kept'));
        const boom = new Error('boom');
        await assert.rejects(
          ctx.store.commit(ref, phase('p2'), async (tx) => {
            await insertSide('lost')(tx);
            throw boom;
          }),
          (error) => error === boom,
        );
        assert.deepEqual(await sideNotes(), ['kept']);
        const record = await ctx.store.get('tenant-1', 'k', RETENTION_MS);
        assert.equal(record?.recoveryPoint, 'p1');
        assert.deepEqual(record?.phaseResults, { p1: { note: 'kept' } });
      });

      it('rolls back the effects when recording throws', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        const bad = new TypeError('bad record');
        await assert.rejects(
          ctx.store.commit({ scope: 'tenant-1', key: 'k', token }, () => {
            throw bad;
          }, insertSide('lost')),
          (error) => error === bad,
        );
        assert.deepEqual(await sideNotes(), []);
      });

      it('returns connections to the pool after failed and fenced transactions', async () => {
        const ref = await claimAndTakeOver('k');
        for (let i = 0; i < 25; i++) {
          await assert.rejects(ctx.store.commit(ref, phase('p'), async () => Promise.reject(new Error(`fail ${i}`))));
          assert.deepEqual(await ctx.store.commit({ ...ref, token: 0 }, phase('p'), insertSide('stale')), { outcome: 'fenced' });
        }
        assert.deepEqual(await ctx.store.commit(ref, phase('p'), insertSide('ok')), { outcome: 'ok', value: { note: 'ok' } });
        assert.deepEqual(await sideNotes(), ['ok']);
      });
    });

    describe('finish', () => {
      const binary = new Uint8Array([0x00, 0xff, 0x7b, 0x00, 0x80, 0x0a, 0x0d, 0xfe, 0x00]);

      it('stores status, headers and exact binary body bytes, and a later claim returns them', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        const response: StoredResponse = {
          status: 402,
          headers: [
            ['content-type', 'application/octet-stream'],
            ['link', '<https://a>; rel="a"'],
            ['link', '<https://b>; rel="b"'],
          ],
          body: binary,
        };
        assert.equal((await ctx.store.commit({ scope: 'tenant-1', key: 'k', token }, finishWith(response))).outcome, 'ok');
        const again = await ctx.store.claim(claimInput('k'));
        assert.equal(again.outcome, 'exists');
        const record = (again as Extract<ClaimResult, { outcome: 'exists' }>).record;
        assert.equal(record.state, 'done');
        assert.equal(record.recoveryPoint, 'finished');
        assert.ok(record.response, 'record.response');
        assert.equal(record.response.status, 402);
        assert.deepEqual(record.response.headers, response.headers);
        assert.ok(record.response.body instanceof Uint8Array, 'record.response.body instanceof Uint8Array');
        assert.deepEqual(Array.from(record.response.body), Array.from(binary));
        const raw = await rawRow('k');
        assert.equal(raw?.locked_until, null, 'the lease is cleared');
        assert.ok(raw?.finished_at instanceof Date, 'raw?.finished_at instanceof Date');
      });

      it('stores an empty body as empty bytes', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        await ctx.store.commit({ scope: 'tenant-1', key: 'k', token }, finishWith({ status: 204, headers: [], body: new Uint8Array(0) }));
        const record = await ctx.store.get('tenant-1', 'k', RETENTION_MS);
        assert.equal(record?.response?.status, 204);
        assert.deepEqual(record?.response?.headers, []);
        assert.equal(record?.response?.body.length, 0);
        const raw = await rawRow('k');
        assert.notEqual(raw?.response_body, null, 'an empty body is stored, not NULL');
      });

      it('commits the last effects together with the response', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        const response: StoredResponse = { status: 201, headers: [], body: binary };
        const result = await ctx.store.commit<StoredResponse>(
          { scope: 'tenant-1', key: 'k', token },
          (r) => ({ kind: 'finish', response: r }),
          async (tx) => {
            await insertSide('paid')(tx);
            return response;
          },
        );
        assert.deepEqual(result, { outcome: 'ok', value: response });
        assert.deepEqual(await sideNotes(), ['paid']);
        assert.equal((await ctx.store.get('tenant-1', 'k', RETENTION_MS))?.state, 'done');
      });

      it('is final: a second finish or phase with the same token is fenced and the first response stays', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        const ref = { scope: 'tenant-1', key: 'k', token };
        await ctx.store.commit(ref, finishWith({ status: 200, headers: [], body: new Uint8Array([1]) }));
        assert.deepEqual(await ctx.store.commit(ref, finishWith({ status: 500, headers: [], body: new Uint8Array([2]) })), {
          outcome: 'fenced',
        });
        assert.deepEqual(await ctx.store.commit(ref, phase('late'), insertSide('late')), { outcome: 'fenced' });
        assert.deepEqual(await sideNotes(), []);
        const record = await ctx.store.get('tenant-1', 'k', RETENTION_MS);
        assert.equal(record?.response?.status, 200);
        assert.deepEqual(Array.from(record?.response?.body ?? []), [1]);
      });
    });

    describe('extendLease', () => {
      it('extends an expired lease while the token is current', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k', { leaseMs: 0 })));
        assert.deepEqual(await ctx.store.extendLease({ scope: 'tenant-1', key: 'k', token }, LONG_LEASE_MS), {
          outcome: 'ok',
          value: undefined,
        });
        const record = await ctx.store.get('tenant-1', 'k', RETENTION_MS);
        assert.equal(record?.leaseExpired, false);
        assert.ok((record?.leaseRemainingMs ?? 0) > LONG_LEASE_MS - 10_000, `lease remaining ${record?.leaseRemainingMs} ms`);
      });

      it('is fenced with a stale token', async () => {
        const ref = await claimAndTakeOver('k');
        assert.deepEqual(await ctx.store.extendLease({ ...ref, token: 0 }, LONG_LEASE_MS), { outcome: 'fenced' });
      });

      it('is fenced on a finished key', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        const ref = { scope: 'tenant-1', key: 'k', token };
        await ctx.store.commit(ref, finishWith({ status: 200, headers: [], body: new Uint8Array() }));
        assert.deepEqual(await ctx.store.extendLease(ref, LONG_LEASE_MS), { outcome: 'fenced' });
        assert.equal((await rawRow('k'))?.locked_until, null);
      });
    });

    describe('release', () => {
      it('keeps the recovery point and expires the lease so a takeover succeeds at once', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        const ref = { scope: 'tenant-1', key: 'k', token };
        await ctx.store.commit(ref, phase('p1'), insertSide('order'));
        assert.deepEqual(await ctx.store.release(ref), { outcome: 'ok', value: 'released' });
        const record = await ctx.store.get('tenant-1', 'k', RETENTION_MS);
        assert.equal(record?.leaseExpired, true);
        assert.equal(record?.recoveryPoint, 'p1');
        assert.deepEqual(record?.phaseResults, { p1: { note: 'order' } });
        assert.deepEqual(await sideNotes(), ['order']);
        const taken = await ctx.store.takeOver(ref, LONG_LEASE_MS);
        assert.deepEqual(taken, { outcome: 'taken', token: 1, recoveryPoint: 'p1', phaseResults: { p1: { note: 'order' } } });
      });

      it('with discard deletes a key on which no phase committed', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        assert.deepEqual(await ctx.store.release({ scope: 'tenant-1', key: 'k', token }, { discard: true }), {
          outcome: 'ok',
          value: 'deleted',
        });
        assert.equal(await rowCount(), 0);
        // The client may fix the request and retry with the same key.
        assert.equal((await ctx.store.claim(claimInput('k', { fingerprint: fp(5) }))).outcome, 'claimed');
      });

      it('with discard only releases a key with a committed phase', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        const ref = { scope: 'tenant-1', key: 'k', token };
        await ctx.store.commit(ref, phase('p1'), insertSide('order'));
        assert.deepEqual(await ctx.store.release(ref, { discard: true }), { outcome: 'ok', value: 'released' });
        const record = await ctx.store.get('tenant-1', 'k', RETENTION_MS);
        assert.ok(record, 'the row is kept');
        assert.equal(record.recoveryPoint, 'p1');
        assert.equal(record.leaseExpired, true);
      });

      it('is fenced with a stale token, with or without discard', async () => {
        const ref = await claimAndTakeOver('k');
        assert.deepEqual(await ctx.store.release({ ...ref, token: 0 }), { outcome: 'fenced' });
        assert.deepEqual(await ctx.store.release({ ...ref, token: 0 }, { discard: true }), { outcome: 'fenced' });
        assert.equal(await rowCount(), 1);
        assert.equal((await ctx.store.get('tenant-1', 'k', RETENTION_MS))?.leaseExpired, false);
      });
    });

    describe('fencing', () => {
      it('lets no write with the old token change the row after a takeover', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k', { leaseMs: 0 })));
        const old = { scope: 'tenant-1', key: 'k', token };
        await ctx.store.commit(old, phase('p1', 0), async () => 'done-by-old');
        const taken = await ctx.store.takeOver(old, LONG_LEASE_MS);
        assert.equal(taken.outcome, 'taken');
        const current = { ...old, token: (taken as { token: number }).token };
        await ctx.store.commit(current, phase('p2'), insertSide('by-new'));
        const before = await rawRow('k');

        assert.deepEqual(await ctx.store.commit(old, phase('p3'), insertSide('by-old')), { outcome: 'fenced' });
        assert.deepEqual(await ctx.store.commit(old, phase('p3')), { outcome: 'fenced' });
        assert.deepEqual(
          await ctx.store.commit(old, finishWith({ status: 200, headers: [], body: new Uint8Array([9]) }), insertSide('by-old')),
          { outcome: 'fenced' },
        );
        assert.deepEqual(await ctx.store.commit(old, finishWith({ status: 200, headers: [], body: new Uint8Array([9]) })), {
          outcome: 'fenced',
        });
        assert.deepEqual(await ctx.store.extendLease(old, LONG_LEASE_MS), { outcome: 'fenced' });
        assert.deepEqual(await ctx.store.release(old), { outcome: 'fenced' });
        assert.deepEqual(await ctx.store.release(old, { discard: true }), { outcome: 'fenced' });
        assert.deepEqual(await ctx.store.takeOver(old, LONG_LEASE_MS), { outcome: 'lost' });

        assert.deepEqual(await rawRow('k'), before);
        assert.deepEqual(await sideNotes(), ['by-new']);
      });
    });

    describe('sweep', () => {
      it('deletes only rows past retention, in batches, and leaves live rows', async () => {
        // Count DELETE statements with a statement-level trigger to see the batches.
        const counter = `${ctx.table}_deletes`;
        await q(db.client).query(`CREATE TABLE "${counter}" (n int NOT NULL)`);
        try {
          await q(db.client).query(`CREATE FUNCTION "${counter}_fn"() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO "${counter}" VALUES (1); RETURN NULL; END $$`);
          await q(db.client).query(
            `CREATE TRIGGER "${counter}_trg" AFTER DELETE ON "${ctx.table}" FOR EACH STATEMENT EXECUTE FUNCTION "${counter}_fn"()`,
          );
          for (let i = 0; i < 10; i++) {
            const token = claimedToken(await ctx.store.claim(claimInput(`old-${i}`)));
            if (i % 2 === 0) {
              await ctx.store.commit({ scope: 'tenant-1', key: `old-${i}`, token }, finishWith({ status: 200, headers: [], body: new Uint8Array() }));
            }
            await age(`old-${i}`);
          }
          for (let i = 0; i < 4; i++) await ctx.store.claim(claimInput(`live-${i}`));

          assert.equal(await ctx.store.sweep({ retentionMs: RETENTION_MS, batchSize: 3 }), 10);
          const keys = (await q(db.client).query(`SELECT key FROM "${ctx.table}" ORDER BY key`)).rows.map((r) => r.key);
          assert.deepEqual(keys, ['live-0', 'live-1', 'live-2', 'live-3']);
          const statements = Number((await q(db.client).query(`SELECT count(*)::int AS n FROM "${counter}"`)).rows[0]!.n);
          assert.equal(statements, 4, 'batches of 3, 3, 3 and 1');

          assert.equal(await ctx.store.sweep({ retentionMs: RETENTION_MS, batchSize: 3 }), 0, 'nothing left to sweep');
          assert.equal(await rowCount(), 4);
        } finally {
          await q(db.client).query(`DROP TABLE IF EXISTS "${counter}"`);
          await q(db.client).query(`DROP FUNCTION IF EXISTS "${counter}_fn"() CASCADE`);
        }
      });

      it('keeps fresh rows with the default 24 h retention', async () => {
        await ctx.store.claim(claimInput('k'));
        assert.equal(await ctx.store.sweep(), 0);
        assert.equal(await rowCount(), 1);
      });

      it('rejects a batch size below 1', async () => {
        await assert.rejects(ctx.store.sweep({ batchSize: 0 }), InvalidOptionError);
      });
    });

    if (engine.name === 'postgres') {
      describe('concurrency on a real server', () => {
        it('gives exactly one of 50 concurrent claims on one key the claim, and "exists" to all others', async () => {
          for (let round = 0; round < 3; round++) {
            const key = `race-${round}`;
            const settled = await Promise.allSettled(Array.from({ length: 50 }, () => ctx.store.claim(claimInput(key))));
            const rejected = settled.filter((s) => s.status === 'rejected');
            assert.deepEqual(rejected, [], 'no claim may throw');
            const results = settled.map((s) => (s as PromiseFulfilledResult<ClaimResult>).value);
            const claimed = results.filter((r) => r.outcome === 'claimed');
            assert.equal(claimed.length, 1, `round ${round}: exactly one claim`);
            assert.deepEqual(claimed[0], { outcome: 'claimed', token: 0 });
            const existing = results.filter((r) => r.outcome === 'exists') as Array<Extract<ClaimResult, { outcome: 'exists' }>>;
            assert.equal(existing.length, 49);
            for (const { record } of existing) {
              assert.equal(record.token, 0);
              assert.equal(record.state, 'started');
              assert.equal(record.leaseExpired, false);
            }
          }
          assert.equal(await rowCount(), 3);
        });

        it('commits 30 phases at once, each with its effects in its own transaction', async () => {
          const refs = await Promise.all(
            Array.from({ length: 30 }, async (_, i) => ({
              scope: 'tenant-1',
              key: `k${i}`,
              token: claimedToken(await ctx.store.claim(claimInput(`k${i}`))),
            })),
          );
          const results = await Promise.all(refs.map((ref) => ctx.store.commit(ref, phase('p'), insertSide(ref.key))));
          assert.ok(results.every((r) => r.outcome === 'ok'), 'every phase committed');
          assert.equal((await sideNotes()).length, 30);
        });
      });
    }
  });
}
