/**
 * Contract of the PostgreSQL store, run against every engine in test/helpers/engines.ts:
 * PGlite always, real PostgreSQL when DATABASE_URL is set; and in both table modes, plain and
 * partitioned (migrate and sweep differ by mode: the plain ones are here, the partitioned
 * ones in test/ops-partitioned.test.ts).
 */
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { engines, freshStore, tableName } from './helpers/engines.js';
import { PostgresStore } from '../src/postgres/index.js';
import { partitionedStatements, statements } from '../src/postgres/sql.js';
import type { Queryable, SqlClient } from '../src/postgres/client.js';
import type { ClaimInput, ClaimResult, CommitRecord, KeyRef, StoredResponse } from '../src/store/types.js';
import { InvalidOptionError } from '../src/core/errors.js';

const LONG_LEASE_MS = 60_000;
const RETENTION_MS = 60_000;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

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

for (const engine of engines) for (const mode of ['plain', 'partitioned'] as const) {
  const partitioned = mode === 'partitioned';
  const sqlFor = partitioned ? partitionedStatements : statements;
  describe(`PostgresStore (${mode} table) on ${engine.name}`, () => {
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
      ctx = await freshStore(db.client, undefined, { partitioned });
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
    /**
     * Moves a row one hour into the past (creation and lease alike), i.e. past RETENTION_MS and
     * past any lease taken with LONG_LEASE_MS: its worker is long gone.
     */
    const age = async (key: string) => {
      await q(db.client).query(
        `UPDATE "${ctx.table}" SET created_at = created_at - interval '1 hour', locked_until = locked_until - interval '1 hour'
         WHERE scope = 'tenant-1' AND key = $1`,
        [key],
      );
    };
    /** Gives `key` a valid lease for another minute, as a live worker's heartbeat would. */
    const renewLease = async (key: string) => {
      await q(db.client).query(
        `UPDATE "${ctx.table}" SET locked_until = now() + interval '1 minute' WHERE scope = 'tenant-1' AND key = $1`,
        [key],
      );
    };
    const currentToken = async (key: string) => Number((await rawRow(key))?.lock_version);
    /**
     * Claims `key` with a lease that is already over, then takes it over. `ref` holds the new
     * token; `stale` the claim's token, which the takeover superseded.
     */
    const claimAndTakeOver = async (key: string): Promise<{ ref: KeyRef; stale: KeyRef }> => {
      const token = claimedToken(await ctx.store.claim(claimInput(key, { leaseMs: 0 })));
      const taken = await ctx.store.takeOver({ scope: 'tenant-1', key, token }, LONG_LEASE_MS);
      assert.equal(taken.outcome, 'taken');
      const newToken = (taken as { token: number }).token;
      assert.ok(newToken > token, `the takeover token ${newToken} must exceed the claim token ${token}`);
      return { ref: { scope: 'tenant-1', key, token: newToken }, stale: { scope: 'tenant-1', key, token } };
    };

    describe('migrate', { skip: partitioned && 'plain-table migration' }, () => {
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
          const token = claimedToken(await stores[0]!.claim(claimInput('k')));
          assert.ok(Number.isSafeInteger(token) && token > 0, `a positive integer token, got ${token}`);
          assert.ok(claimedToken(await stores[1]!.claim(claimInput('k2'))) > token, 'the stores share one token sequence');
        } finally {
          await q(db.client).query(`DROP TABLE IF EXISTS "${table}_blobs"`);
          await q(db.client).query(`DROP TABLE IF EXISTS "${table}"`);
          await q(db.client).query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
        }
      });

      it('rejects a table name that is not a plain identifier', () => {
        assert.throws(() => new PostgresStore({ client: db.client, table: 'keys; DROP TABLE x' }), InvalidOptionError);
        assert.throws(() => new PostgresStore({ client: db.client, table: 'a.b.c' }), InvalidOptionError);
      });

      it('rejects a table name too long for its token sequence, naming the limit', () => {
        assert.throws(() => new PostgresStore({ client: db.client, table: 'k'.repeat(47) }), /at most 46 characters/);
        assert.doesNotThrow(() => new PostgresStore({ client: db.client, table: 'k'.repeat(46) }));
      });

      it('upgrades a table whose tokens came from DEFAULT 0: new tokens exceed every token in use', async () => {
        const table = tableName();
        try {
          // The table as the first migration created it: per-row tokens starting at 0.
          await q(db.client).query(`CREATE TABLE "${table}" (
            scope text NOT NULL, key text NOT NULL, fingerprint bytea NOT NULL, state text NOT NULL DEFAULT 'started',
            recovery_point text NOT NULL DEFAULT 'start', phase_results jsonb NOT NULL DEFAULT '{}'::jsonb,
            locked_until timestamptz, lock_version bigint NOT NULL DEFAULT 0, response_status int,
            response_headers jsonb, response_body bytea, created_at timestamptz NOT NULL DEFAULT now(),
            finished_at timestamptz, PRIMARY KEY (scope, key))`);
          await q(db.client).query(`INSERT INTO "${table}" (scope, key, fingerprint, lock_version) VALUES ('tenant-1', 'old', $1, 41)`, [fp(1)]);
          const store = new PostgresStore({ client: db.client, table });
          await store.migrate();
          await store.migrate();
          const token = claimedToken(await store.claim(claimInput('new')));
          assert.ok(token > 41, `a new claim's token (${token}) must exceed the highest token in use (41)`);
          // The upgrade also added claim_id: the existing row got one, and new claims get their own.
          const column = (
            await q(db.client).query(
              `SELECT data_type, is_nullable FROM information_schema.columns WHERE table_name = $1 AND column_name = 'claim_id'`,
              [table],
            )
          ).rows[0];
          assert.deepEqual(column, { data_type: 'uuid', is_nullable: 'NO' }, 'claim_id was added as uuid NOT NULL');
          const rows = (await q(db.client).query(`SELECT key, claim_id::text AS claim_id FROM "${table}" ORDER BY key`)).rows;
          assert.equal(rows.length, 2);
          for (const row of rows) assert.match(String(row.claim_id), UUID, `claim_id of ${String(row.key)}`);
          const newClaim = await store.claim(claimInput('new2'));
          assert.equal(newClaim.outcome, 'claimed');
          const { claimId } = newClaim as { claimId: string };
          assert.match(claimId, UUID);
          assert.ok(!rows.some((r) => r.claim_id === claimId), 'a new claim gets a claim id of its own');
          assert.equal((await store.get('tenant-1', 'new2', RETENTION_MS))?.claimId, claimId, 'the record carries the claim id');
          assert.equal((await store.get('tenant-1', 'old', RETENTION_MS))?.claimId, rows[1]!.claim_id, 'the old row reads with its claim id');
        } finally {
          await q(db.client).query(`DROP TABLE IF EXISTS "${table}_blobs"`);
          await q(db.client).query(`DROP TABLE IF EXISTS "${table}"`);
          await q(db.client).query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
        }
      });
    });

    describe('claim', () => {
      it('claims a new key with a positive token, then returns the existing record with that token', async () => {
        const before = Date.now();
        const claimed = await ctx.store.claim(claimInput('k1'));
        const token = claimedToken(claimed);
        assert.deepEqual(Object.keys(claimed).sort(), ['claimId', 'outcome', 'token']);
        assert.ok(Number.isSafeInteger(token) && token > 0, `a positive integer token, got ${token}`);
        const again = await ctx.store.claim(claimInput('k1', { fingerprint: fp(2) }));
        assert.equal(again.outcome, 'exists');
        const record = (again as Extract<ClaimResult, { outcome: 'exists' }>).record;
        assert.equal(record.scope, 'tenant-1');
        assert.equal(record.key, 'k1');
        assert.equal(record.state, 'started');
        assert.deepEqual(Array.from(record.fingerprint), Array.from(fp(1)), 'the stored fingerprint is the first one');
        assert.equal(record.recoveryPoint, 'start');
        assert.deepEqual(record.phaseResults, {});
        assert.equal(record.token, token);
        assert.equal(record.leaseExpired, false);
        assert.ok(record.leaseRemainingMs > 0 && record.leaseRemainingMs <= LONG_LEASE_MS, `${record.leaseRemainingMs}`);
        assert.equal(record.response, undefined);
        assert.ok(record.createdAt instanceof Date, 'record.createdAt instanceof Date');
        assert.ok(Math.abs(record.createdAt.getTime() - before) < 60_000, 'created_at is now, by the database clock');
        assert.equal(await rowCount(), 1);
      });

      it('keeps keys of different scopes apart', async () => {
        const t1 = claimedToken(await ctx.store.claim(claimInput('k')));
        const t2 = claimedToken(await ctx.store.claim(claimInput('k', { scope: 'tenant-2' })));
        assert.equal(await rowCount(), 2);
        assert.equal((await ctx.store.get('tenant-1', 'k', RETENTION_MS))?.token, t1);
        assert.equal((await ctx.store.get('tenant-2', 'k', RETENTION_MS))?.token, t2);
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
        const fresh = claimedToken(await ctx.store.claim(claimInput('k')));
        assert.ok(fresh > token, `new token ${fresh} must exceed old token ${token}`);
        const record = await ctx.store.get('tenant-1', 'k', RETENTION_MS);
        assert.equal(record?.state, 'started');
        assert.equal(record?.response, undefined);
        const raw = await rawRow('k');
        assert.equal(raw?.response_status, null);
        assert.equal(raw?.response_body, null);
      });

      it('lets exactly one of many concurrent claims replace a row past retention', async () => {
        const old = claimedToken(await ctx.store.claim(claimInput('k')));
        await age('k');
        const results = await Promise.all(Array.from({ length: 20 }, () => ctx.store.claim(claimInput('k'))));
        const claimed = results.filter((r) => r.outcome === 'claimed');
        assert.equal(claimed.length, 1);
        const fresh = claimedToken(claimed[0]!);
        assert.ok(fresh > old, `new token ${fresh} must exceed old token ${old}`);
        for (const r of results.filter((r) => r.outcome === 'exists')) {
          assert.equal((r as Extract<ClaimResult, { outcome: 'exists' }>).record.token, fresh);
        }
        assert.equal(await rowCount(), 1);
        assert.equal(await currentToken('k'), fresh);
      });

      it('does not replace a row past retention while its lease is valid: the claim reports it as existing', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        const ref = { scope: 'tenant-1', key: 'k', token };
        await ctx.store.commit(ref, phase('p1'), insertSide('first'));
        await age('k');
        await renewLease('k'); // the worker is alive past retention (its heartbeat runs)
        const before = await rawRow('k');

        for (const fingerprint of [fp(1), fp(9)]) {
          const again = await ctx.store.claim(claimInput('k', { fingerprint }));
          assert.equal(again.outcome, 'exists', `fingerprint ${fingerprint[0]}: ${JSON.stringify(again)}`);
          const record = (again as Extract<ClaimResult, { outcome: 'exists' }>).record;
          assert.equal(record.token, token);
          assert.equal(record.state, 'started');
          assert.equal(record.leaseExpired, false);
          assert.ok(record.leaseRemainingMs > 0, `lease remaining ${record.leaseRemainingMs} ms`);
          assert.equal(record.recoveryPoint, 'p1');
          assert.deepEqual(Array.from(record.fingerprint), Array.from(fp(1)), 'the live row keeps its fingerprint');
        }
        assert.deepEqual(await rawRow('k'), before, 'the live row is untouched');
        // Its worker goes on and finishes.
        assert.equal((await ctx.store.commit(ref, finishWith({ status: 201, headers: [], body: new Uint8Array([1]) }))).outcome, 'ok');
        assert.deepEqual(await sideNotes(), ['first']);
      });

      it('the replace statement itself refuses a row whose lease was renewed after the claim read it as expired', async () => {
        // The claim read the row (past retention, lease over), then the live worker's heartbeat
        // renewed the lease under the same token: the replace, fenced on that token, must still
        // leave the row alone.
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        await age('k');
        await renewLease('k');
        const before = await rawRow('k');
        const replaced = await q(db.client).query(sqlFor(ctx.table).replaceExpired, ['tenant-1', 'k', fp(9), LONG_LEASE_MS, RETENTION_MS, token]);
        assert.deepEqual(replaced.rows, []);
        assert.deepEqual(await rawRow('k'), before);
      });
    });

    describe('claim id', () => {
      const claimedId = (result: ClaimResult): string => {
        assert.equal(result.outcome, 'claimed', `expected a claim, got ${JSON.stringify(result)}`);
        const { claimId } = result as { claimId: string };
        assert.match(claimId, UUID);
        return claimId;
      };

      it('is reported by claim, stored on the row, and returned with the existing record', async () => {
        const id = claimedId(await ctx.store.claim(claimInput('k')));
        assert.equal(String((await rawRow('k'))?.claim_id), id);
        const again = await ctx.store.claim(claimInput('k'));
        assert.equal(again.outcome, 'exists');
        assert.equal((again as { record: { claimId: string } }).record.claimId, id);
        assert.equal((await ctx.store.get('tenant-1', 'k', RETENTION_MS))?.claimId, id);
        assert.notEqual(claimedId(await ctx.store.claim(claimInput('k2'))), id, 'each key has its own claim id');
      });

      it('is kept by a takeover', async () => {
        const id = claimedId(await ctx.store.claim(claimInput('k', { leaseMs: 0 })));
        const token = await currentToken('k');
        const taken = await ctx.store.takeOver({ scope: 'tenant-1', key: 'k', token }, LONG_LEASE_MS);
        assert.equal(taken.outcome, 'taken');
        assert.equal((taken as { claimId: string }).claimId, id, 'the takeover continues the claim');
        assert.ok((taken as { token: number }).token > token, 'with a new token');
        assert.equal(String((await rawRow('k'))?.claim_id), id);
      });

      it('changes when the key is claimed again after a discard', async () => {
        const id = claimedId(await ctx.store.claim(claimInput('k')));
        const token = await currentToken('k');
        assert.deepEqual(await ctx.store.release({ scope: 'tenant-1', key: 'k', token }, { discard: true }), { outcome: 'ok', value: 'deleted' });
        const next = claimedId(await ctx.store.claim(claimInput('k')));
        assert.notEqual(next, id, 'a claim after a discard is a new claim');
        assert.equal(String((await rawRow('k'))?.claim_id), next);
      });

      it('changes when a row past retention is replaced', async () => {
        const id = claimedId(await ctx.store.claim(claimInput('k')));
        const token = await currentToken('k');
        await ctx.store.commit({ scope: 'tenant-1', key: 'k', token }, finishWith({ status: 201, headers: [], body: new Uint8Array([1]) }));
        await age('k');
        const next = claimedId(await ctx.store.claim(claimInput('k', { fingerprint: fp(2) })));
        assert.notEqual(next, id, 'a claim past retention is a new claim');
        assert.equal(String((await rawRow('k'))?.claim_id), next, 'the row carries the new claim id');
        assert.equal((await ctx.store.get('tenant-1', 'k', RETENTION_MS))?.claimId, next);
      });
    });

    describe('get', () => {
      it('returns undefined for an absent key', async () => {
        assert.equal(await ctx.store.get('tenant-1', 'nope', RETENTION_MS), undefined);
      });
    });

    describe('takeOver', () => {
      it('takes over an expired lease with a higher token, keeping recovery point and results', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        await ctx.store.commit({ scope: 'tenant-1', key: 'k', token }, phase('p1', 0), async () => ({ id: 7 }));
        const claimId = (await ctx.store.get('tenant-1', 'k', RETENTION_MS))?.claimId;
        const taken = await ctx.store.takeOver({ scope: 'tenant-1', key: 'k', token }, LONG_LEASE_MS);
        assert.equal(taken.outcome, 'taken');
        const { token: newToken, ...rest } = taken as Extract<typeof taken, { outcome: 'taken' }>;
        assert.deepEqual(rest, { outcome: 'taken', claimId, recoveryPoint: 'p1', phaseResults: { p1: { id: 7 } } });
        assert.ok(newToken > token, `takeover token ${newToken} must exceed ${token}`);
        const record = await ctx.store.get('tenant-1', 'k', RETENTION_MS);
        assert.equal(record?.token, newToken);
        assert.equal(record?.leaseExpired, false);
      });

      it('loses while the lease is still valid', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        assert.deepEqual(await ctx.store.takeOver({ scope: 'tenant-1', key: 'k', token }, LONG_LEASE_MS), { outcome: 'lost' });
        assert.equal((await ctx.store.get('tenant-1', 'k', RETENTION_MS))?.token, token);
      });

      it('loses with a stale token even when the lease has expired', async () => {
        const { ref, stale } = await claimAndTakeOver('k');
        await ctx.store.release(ref); // the lease is over again; the token is ref's
        assert.deepEqual(await ctx.store.takeOver(stale, LONG_LEASE_MS), { outcome: 'lost' });
        assert.equal(await currentToken('k'), ref.token, 'the stale takeover changed nothing');
        const taken = await ctx.store.takeOver(ref, LONG_LEASE_MS);
        assert.equal(taken.outcome, 'taken');
        assert.ok((taken as { token: number }).token > ref.token, 'a second takeover gets a higher token again');
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

    describe('completer: saveRequest and listAbandoned', () => {
      const snapshot = { method: 'POST', url: '/v1/charges?x=1', contentType: 'application/json', body: new Uint8Array([0, 123, 255]) };
      const list = (graceMs = 0) => ctx.store.listAbandoned({ limit: 100, graceMs, retentionMs: RETENTION_MS });

      it('lists a started key whose lease expired, with its request snapshot byte for byte', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k', { leaseMs: 0 })));
        assert.deepEqual(await ctx.store.saveRequest({ scope: 'tenant-1', key: 'k', token }, snapshot), { outcome: 'ok', value: undefined });
        const found = await list();
        assert.equal(found.length, 1, 'one abandoned key');
        assert.equal(found[0]!.record.key, 'k');
        assert.equal(found[0]!.record.token, token);
        assert.deepEqual(found[0]!.request, snapshot, 'the snapshot round-trips, binary body included');
      });

      it('lists a released key and one without a snapshot (request undefined)', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('k')));
        await ctx.store.release({ scope: 'tenant-1', key: 'k', token });
        const found = await list(60_000);
        assert.deepEqual(found.map((a) => a.record.key), ['k'], 'a released lease counts at once, whatever the grace');
        assert.equal(found[0]!.request, undefined);
      });

      it('never lists a live lease, a lease inside the grace, a finished key or a key past retention', async () => {
        claimedToken(await ctx.store.claim(claimInput('live')));
        claimedToken(await ctx.store.claim(claimInput('grace', { leaseMs: 0 })));
        const done = claimedToken(await ctx.store.claim(claimInput('done', { leaseMs: 0 })));
        await ctx.store.commit({ scope: 'tenant-1', key: 'done', token: done }, finishWith({ status: 201, headers: [], body: new Uint8Array() }));
        claimedToken(await ctx.store.claim(claimInput('old', { leaseMs: 0 })));
        await age('old');
        assert.deepEqual(await list(60_000), [], 'grace 60 s: the just-expired lease is not abandoned yet');
        assert.deepEqual((await list(0)).map((a) => a.record.key), ['grace']);
      });

      it('drops the request snapshot when a row past retention is replaced (docs/model MUT_REPLACE_KEEPS_REQUEST)', async () => {
        const old = claimedToken(await ctx.store.claim(claimInput('k', { leaseMs: 0 })));
        await ctx.store.saveRequest({ scope: 'tenant-1', key: 'k', token: old }, snapshot);
        await age('k');
        // Another request claims the key past retention, then crashes before saving its own
        // snapshot: the completer must not find the old request on the new claim.
        claimedToken(await ctx.store.claim(claimInput('k', { fingerprint: fp(9), leaseMs: 0 })));
        assert.equal((await rawRow('k'))?.request, null, 'the replaced row keeps no request snapshot');
        const found = await list();
        assert.equal(found.length, 1);
        assert.equal(found[0]!.request, undefined, 'the completer would discard it, not run the old request');
      });

      it('fences saveRequest: a stale token stores nothing', async () => {
        const { stale } = await claimAndTakeOver('k');
        assert.deepEqual(await ctx.store.saveRequest(stale, snapshot), { outcome: 'fenced' });
        assert.equal((await rawRow('k'))?.request, null);
      });

      it('lets one of two completers take a listed key over (compare-and-set on the token)', async () => {
        claimedToken(await ctx.store.claim(claimInput('k', { leaseMs: 0 })));
        const [a, b] = await Promise.all([list(), list()]);
        const results = await Promise.all([a![0]!, b![0]!].map((x) => ctx.store.takeOver({ scope: 'tenant-1', key: 'k', token: x.record.token }, LONG_LEASE_MS)));
        assert.deepEqual(results.map((r) => r.outcome).sort(), ['lost', 'taken']);
        assert.deepEqual(await list(), [], 'a taken-over key is no longer abandoned');
      });

      it('adds the request column to a table migrated before it existed', async () => {
        await q(db.client).query(`ALTER TABLE "${ctx.table}" DROP COLUMN request`);
        await ctx.store.migrate();
        const token = claimedToken(await ctx.store.claim(claimInput('k', { leaseMs: 0 })));
        await ctx.store.saveRequest({ scope: 'tenant-1', key: 'k', token }, snapshot);
        assert.deepEqual((await list())[0]?.request, snapshot);
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
        const { stale } = await claimAndTakeOver('k');
        const before = await rawRow('k');
        const result = await ctx.store.commit(stale, phase('p1'), insertSide('stale'));
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
        const { ref, stale } = await claimAndTakeOver('k');
        for (let i = 0; i < 25; i++) {
          await assert.rejects(ctx.store.commit(ref, phase('p'), async () => Promise.reject(new Error(`fail ${i}`))));
          assert.deepEqual(await ctx.store.commit(stale, phase('p'), insertSide('stale')), { outcome: 'fenced' });
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
        const { stale } = await claimAndTakeOver('k');
        assert.deepEqual(await ctx.store.extendLease(stale, LONG_LEASE_MS), { outcome: 'fenced' });
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
        assert.equal(taken.outcome, 'taken');
        const { token: newToken, ...rest } = taken as Extract<typeof taken, { outcome: 'taken' }>;
        assert.deepEqual(rest, { outcome: 'taken', claimId: record?.claimId, recoveryPoint: 'p1', phaseResults: { p1: { note: 'order' } } });
        assert.ok(newToken > token, `takeover token ${newToken} must exceed ${token}`);
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
        const { stale } = await claimAndTakeOver('k');
        assert.deepEqual(await ctx.store.release(stale), { outcome: 'fenced' });
        assert.deepEqual(await ctx.store.release(stale, { discard: true }), { outcome: 'fenced' });
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

      it('hands out strictly increasing tokens for one key across claim, takeover, discard, claim, retention and claim', async () => {
        const tokens: number[] = [];
        const t0 = claimedToken(await ctx.store.claim(claimInput('k', { leaseMs: 0 })));
        tokens.push(t0);
        const taken = await ctx.store.takeOver({ scope: 'tenant-1', key: 'k', token: t0 }, LONG_LEASE_MS);
        assert.equal(taken.outcome, 'taken');
        const t1 = (taken as { token: number }).token;
        tokens.push(t1);
        assert.deepEqual(await ctx.store.release({ scope: 'tenant-1', key: 'k', token: t1 }, { discard: true }), { outcome: 'ok', value: 'deleted' });
        assert.equal(await rowCount(), 0);
        // Other keys drawing tokens in between must not matter.
        await ctx.store.claim(claimInput('other'));
        const t2 = claimedToken(await ctx.store.claim(claimInput('k', { fingerprint: fp(2) })));
        tokens.push(t2);
        await ctx.store.commit({ scope: 'tenant-1', key: 'k', token: t2 }, finishWith({ status: 200, headers: [], body: new Uint8Array() }));
        await age('k');
        const t3 = claimedToken(await ctx.store.claim(claimInput('k', { fingerprint: fp(3) }))); // replaces the row past retention
        tokens.push(t3);
        if (partitioned) {
          // Partitioned sweeps drop whole days: move the row into yesterday's partition, alone.
          await q(db.client).query(`DELETE FROM "${ctx.table}" WHERE key = 'other'`);
          await q(db.client).query(
            `UPDATE "${ctx.table}" SET created_at = date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '1 hour',
               locked_until = NULL WHERE key = 'k'`,
          );
        } else await age('k');
        // Partitioned: yesterday's partition is past a retention of 1 ms from 00:00:00.001 UTC on;
        // with RETENTION_MS it would only be after 00:01, and this test would fail in that minute.
        assert.equal(await ctx.store.sweep({ retentionMs: partitioned ? 1 : RETENTION_MS }), 1, 'the swept row');
        const t4 = claimedToken(await ctx.store.claim(claimInput('k', { fingerprint: fp(4) })));
        tokens.push(t4);
        for (let i = 1; i < tokens.length; i++) {
          assert.ok(tokens[i]! > Math.max(...tokens.slice(0, i)), `token ${i} (${tokens[i]}) must exceed every earlier one: ${tokens.join(', ')}`);
        }
        // Every earlier token is fenced on the latest claim.
        const before = await rawRow('k');
        for (const token of tokens.slice(0, -1)) {
          const stale = { scope: 'tenant-1', key: 'k', token };
          assert.deepEqual(await ctx.store.commit(stale, phase('late'), insertSide(`stale-${token}`)), { outcome: 'fenced' }, `token ${token}`);
          assert.deepEqual(await ctx.store.commit(stale, finishWith({ status: 500, headers: [], body: new Uint8Array() })), { outcome: 'fenced' });
          assert.deepEqual(await ctx.store.extendLease(stale, LONG_LEASE_MS), { outcome: 'fenced' });
          assert.deepEqual(await ctx.store.release(stale, { discard: true }), { outcome: 'fenced' });
        }
        assert.deepEqual(await rawRow('k'), before);
        assert.deepEqual(await sideNotes(), []);
      });

      it('fences a stale worker out of a claim made after a discard', async () => {
        // Worker A claims and hangs; its lease runs out and B takes over, then B discards (the
        // request failed validation); the client's fixed request claims the key again.
        const { ref: b, stale: a } = await claimAndTakeOver('k');
        assert.deepEqual(await ctx.store.release(b, { discard: true }), { outcome: 'ok', value: 'deleted' });
        const c = { scope: 'tenant-1', key: 'k', token: claimedToken(await ctx.store.claim(claimInput('k', { fingerprint: fp(7) }))) };
        assert.ok(c.token > b.token && c.token > a.token, `the new claim's token ${c.token} exceeds ${a.token} and ${b.token}`);
        const before = await rawRow('k');
        for (const stale of [a, b]) {
          assert.deepEqual(await ctx.store.commit(stale, phase('late'), insertSide('stale')), { outcome: 'fenced' });
          assert.deepEqual(await ctx.store.release(stale), { outcome: 'fenced' });
        }
        assert.deepEqual(await rawRow('k'), before);
        assert.deepEqual(await sideNotes(), []);
        assert.deepEqual(await ctx.store.commit(c, phase('p1'), insertSide('fresh')), { outcome: 'ok', value: { note: 'fresh' } });
        assert.deepEqual(await sideNotes(), ['fresh']);
      });
    });

    describe('sweep', { skip: partitioned && 'plain-table sweep' }, () => {
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

      it('leaves a row past retention alone while its lease is valid, and deletes it once the lease expired', async () => {
        const token = claimedToken(await ctx.store.claim(claimInput('live')));
        await ctx.store.commit({ scope: 'tenant-1', key: 'live', token }, phase('p1'), insertSide('live'));
        await age('live');
        await renewLease('live'); // its worker is still running past retention
        assert.equal(await ctx.store.sweep({ retentionMs: RETENTION_MS }), 0);
        assert.equal(await rowCount(), 1);
        assert.equal(await currentToken('live'), token);

        await q(db.client).query(`UPDATE "${ctx.table}" SET locked_until = now() - interval '1 second' WHERE key = 'live'`);
        assert.equal(await ctx.store.sweep({ retentionMs: RETENTION_MS }), 1, 'the lease ran out: now it is swept');
        assert.equal(await rowCount(), 0);
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
            const token = claimedToken(claimed[0]!);
            const existing = results.filter((r) => r.outcome === 'exists') as Array<Extract<ClaimResult, { outcome: 'exists' }>>;
            assert.equal(existing.length, 49);
            for (const { record } of existing) {
              assert.equal(record.token, token);
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
