/**
 * What only the PostgreSQL store does, beyond the store contract every store passes
 * (test/contracts/store.ts, run by test/store-contract.test.ts): migrations, the SQL
 * statements themselves, the columns a row keeps, the sweep's batches. Run against every
 * engine in test/helpers/engines.ts (PGlite always, real PostgreSQL when DATABASE_URL is set)
 * and in both table modes, plain and partitioned (migrate and sweep differ by mode: the plain
 * ones are here, the partitioned ones in test/ops-partitioned.test.ts).
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

const snapshot = { method: 'POST', url: '/v1/charges?x=1', contentType: 'application/json', body: new Uint8Array([0, 123, 255]) };
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

const fp = (n: number): Uint8Array => new Uint8Array(32).fill(n);
const q = (client: SqlClient): Queryable => client as Queryable;

function claimInput(key: string, overrides: Partial<ClaimInput> = {}): ClaimInput {
  return { scope: 'tenant-1', key, fingerprint: fp(1), leaseMs: LONG_LEASE_MS, retentionMs: RETENTION_MS, ...overrides };
}

function claimedToken(result: ClaimResult): number {
  assert.equal(result.kind, 'claimed', `expected a claim, got ${JSON.stringify(result)}`);
  return (result as { token: number }).token;
}

const _phase =
  (name: string, leaseMs = LONG_LEASE_MS) =>
  (value: unknown): CommitRecord => ({
    kind: 'phase',
    phase: name,
    result: value,
    leaseMs,
  });
const finishWith = (response: StoredResponse) => (): CommitRecord => ({ kind: 'finish', response });

for (const engine of engines)
  for (const mode of ['plain', 'partitioned'] as const) {
    const partitioned = mode === 'partitioned';
    const sqlFor = partitioned ? partitionedStatements : statements;
    describe(`PostgresStore (${mode} table) on ${engine.name}`, () => {
      let db: Awaited<ReturnType<typeof engine.open>>;
      let ctx: Awaited<ReturnType<typeof freshStore>>;

      before(async () => {
        db = await engine.open();
      });
      after(async () => {
        await db.close();
      });
      beforeEach(async () => {
        ctx = await freshStore(db.client, undefined, { partitioned });
      });
      afterEach(async () => {
        await ctx.drop();
      });

      const rawRow = async (key: string) => (await q(db.client).query(`SELECT * FROM "${ctx.table}" WHERE scope = 'tenant-1' AND key = $1`, [key])).rows[0];
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
        await q(db.client).query(`UPDATE "${ctx.table}" SET locked_until = now() + interval '1 minute' WHERE scope = 'tenant-1' AND key = $1`, [key]);
      };
      const currentToken = async (key: string) => Number((await rawRow(key))?.lock_version);
      /**
       * Claims `key` with a lease that is already over, then takes it over. `ref` holds the new
       * token; `stale` the claim's token, which the takeover superseded.
       */
      const claimAndTakeOver = async (key: string): Promise<{ ref: KeyRef; stale: KeyRef }> => {
        const token = claimedToken(await ctx.store.claim(claimInput(key, { leaseMs: 0 })));
        const taken = await ctx.store.takeOver({ scope: 'tenant-1', key, token }, LONG_LEASE_MS);
        assert.equal(taken.kind, 'taken');
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
              await q(db.client).query(`SELECT data_type, is_nullable FROM information_schema.columns WHERE table_name = $1 AND column_name = 'claim_id'`, [
                table,
              ])
            ).rows[0];
            assert.deepEqual(column, { data_type: 'uuid', is_nullable: 'NO' }, 'claim_id was added as uuid NOT NULL');
            const rows = (await q(db.client).query(`SELECT key, claim_id::text AS claim_id FROM "${table}" ORDER BY key`)).rows;
            assert.equal(rows.length, 2);
            for (const row of rows) assert.match(String(row.claim_id), UUID, `claim_id of ${String(row.key)}`);
            const newClaim = await store.claim(claimInput('new2'));
            assert.equal(newClaim.kind, 'claimed');
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

        it('clears the response columns of a finished row it replaces past retention', async () => {
          const token = claimedToken(await ctx.store.claim(claimInput('k')));
          await ctx.store.commit({ scope: 'tenant-1', key: 'k', token }, finishWith({ status: 201, headers: [], body: new Uint8Array([1]) }));
          await age('k');
          claimedToken(await ctx.store.claim(claimInput('k')));
          const raw = await rawRow('k');
          assert.equal(raw?.response_status, null);
          assert.equal(raw?.response_body, null);
        });
      });

      describe('columns', () => {
        it('stores the claim id in claim_id: kept by a takeover, new after a discard', async () => {
          const claimed = await ctx.store.claim(claimInput('k', { leaseMs: 0 }));
          const id = (claimed as { claimId: string }).claimId;
          assert.equal(String((await rawRow('k'))?.claim_id), id);
          const token = await currentToken('k');
          const taken = await ctx.store.takeOver({ scope: 'tenant-1', key: 'k', token }, LONG_LEASE_MS);
          assert.equal(String((await rawRow('k'))?.claim_id), id, 'kept by the takeover');
          const ref = { scope: 'tenant-1', key: 'k', token: (taken as { token: number }).token };
          await ctx.store.discard(ref);
          const next = (await ctx.store.claim(claimInput('k'))) as { claimId: string };
          assert.equal(String((await rawRow('k'))?.claim_id), next.claimId, 'a new claim id after a discard');
          assert.notEqual(next.claimId, id);
        });

        it('finish clears locked_until, sets finished_at and stores an empty body as empty bytes, not NULL', async () => {
          const token = claimedToken(await ctx.store.claim(claimInput('k')));
          await ctx.store.commit({ scope: 'tenant-1', key: 'k', token }, finishWith({ status: 204, headers: [], body: new Uint8Array(0) }));
          const raw = await rawRow('k');
          assert.equal(raw?.locked_until, null, 'the lease is cleared');
          assert.ok(raw?.finished_at instanceof Date, 'raw?.finished_at instanceof Date');
          assert.notEqual(raw?.response_body, null, 'an empty body is stored, not NULL');
          assert.deepEqual(await ctx.store.extendLease({ scope: 'tenant-1', key: 'k', token }, LONG_LEASE_MS), { kind: 'fenced' });
          assert.equal((await rawRow('k'))?.locked_until, null, 'a fenced heartbeat leaves it cleared');
        });

        it('a fenced saveRequest leaves the request column NULL', async () => {
          const { stale } = await claimAndTakeOver('k');
          assert.deepEqual(await ctx.store.saveRequest(stale, snapshot), { kind: 'fenced' });
          assert.equal((await rawRow('k'))?.request, null);
        });

        it('adds the request column to a table migrated before it existed', async () => {
          await q(db.client).query(`ALTER TABLE "${ctx.table}" DROP COLUMN request`);
          await ctx.store.migrate();
          const token = claimedToken(await ctx.store.claim(claimInput('k', { leaseMs: 0 })));
          await ctx.store.saveRequest({ scope: 'tenant-1', key: 'k', token }, snapshot);
          assert.deepEqual((await ctx.store.listAbandoned({ limit: 100, graceMs: 0, retentionMs: RETENTION_MS }))[0]?.request, snapshot);
        });
      });

      describe('sweep', { skip: partitioned && 'plain-table sweep' }, () => {
        it('deletes rows past retention in batches of batchSize, one DELETE statement each', async () => {
          // Count DELETE statements with a statement-level trigger to see the batches.
          const counter = `${ctx.table}_deletes`;
          await q(db.client).query(`CREATE TABLE "${counter}" (n int NOT NULL)`);
          try {
            await q(db.client).query(`CREATE FUNCTION "${counter}_fn"() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO "${counter}" VALUES (1); RETURN NULL; END $$`);
            await q(db.client).query(`CREATE TRIGGER "${counter}_trg" AFTER DELETE ON "${ctx.table}" FOR EACH STATEMENT EXECUTE FUNCTION "${counter}_fn"()`);
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
          } finally {
            await q(db.client).query(`DROP TABLE IF EXISTS "${counter}"`);
            await q(db.client).query(`DROP FUNCTION IF EXISTS "${counter}_fn"() CASCADE`);
          }
        });
      });
    });
  }
