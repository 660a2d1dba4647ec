/**
 * The plain-table claim chooses how it starts from the store's recent claims (src/postgres/
 * claim.ts, `replayShare`): claim first (the claim statement alone) while new keys dominate,
 * read first (`readDone`, then the claim only on a miss) while replays dominate. Both paths
 * must decide alike (protocol.md K3); this file checks the choice by the statements issued,
 * and that a record read either way is the same. PGlite always, real PostgreSQL with
 * DATABASE_URL.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { engines, freshStore } from './helpers/engines.js';
import { needs, serviceUrl } from './helpers/services.js';
import { statements } from '../src/postgres/sql.js';
import { PostgresStore } from '../src/postgres/index.js';
import { pinClaimPath } from '../src/postgres/claim.js';
import type { StoreContext } from '../src/postgres/context.js';
import type { ClaimInput, CommitRecord, KeyRecord } from '../src/store/types.js';

const fp = (n: number): Uint8Array => new Uint8Array(32).fill(n);
const input = (key: string, fingerprint = fp(1)): ClaimInput => ({ scope: 's', key, fingerprint, leaseMs: 60_000, retentionMs: 60_000 });
const finish = (): CommitRecord => ({ kind: 'finish', response: { status: 201, headers: [['content-type', 'text/plain']], body: new Uint8Array([1, 2, 3]) } });

/** Every statement text sent, on either engine (pg: any Client; PGlite: this instance). */
const sent: string[] = [];
const textOf = (c: unknown) => (typeof c === 'string' ? c : ((c as { text?: string })?.text ?? ''));
const pgQuery = pg.Client.prototype.query;
before(() => {
  pg.Client.prototype.query = function (this: pg.Client, config: unknown, ...rest: unknown[]) {
    sent.push(textOf(config));
    return (pgQuery as (...a: unknown[]) => unknown).call(this, config, ...rest);
  } as typeof pgQuery;
});
after(() => {
  pg.Client.prototype.query = pgQuery;
});

for (const engine of engines) {
  describe(`claim path on a plain table (${engine.name})`, () => {
    let opened: Awaited<ReturnType<(typeof engines)[number]['open']>>;
    let fresh: Awaited<ReturnType<typeof freshStore>>;
    let store: PostgresStore;
    let sql: ReturnType<typeof statements>;
    before(async () => {
      opened = await engine.open();
      if (engine.name === 'pglite') {
        const db = opened.client as { query: (...a: unknown[]) => Promise<unknown> };
        const own = db.query.bind(db);
        db.query = (text: unknown, ...rest: unknown[]) => {
          sent.push(textOf(text));
          return own(text, ...rest);
        };
      }
      fresh = await freshStore(opened.client);
      store = fresh.store;
      sql = statements(fresh.table);
    });
    after(async () => {
      await fresh.drop();
      await opened.close();
    });
    const count = async (fn: () => Promise<unknown>) => {
      sent.length = 0;
      await fn();
      return { readDone: sent.filter((t) => t === sql.readDone).length, claim: sent.filter((t) => t === sql.claim).length };
    };
    const claimAndFinish = async (key: string) => {
      const r = await store.claim(input(key));
      assert.equal(r.kind, 'claimed');
      const token = (r as { token: number }).token;
      assert.equal((await store.commit({ scope: 's', key, token }, finish)).kind, 'ok');
    };

    it('a fresh store claims new keys with the claim statement alone, then reads first once replays dominate, and back', async () => {
      for (let i = 0; i < 5; i++) assert.deepEqual(await count(() => claimAndFinish(`new-${i}-${randomUUID()}`)), { readDone: 0, claim: 1 });
      const done = `done-${randomUUID()}`;
      await claimAndFinish(done);
      // The first replays go through the claim statement (claim first), the later ones through readDone alone.
      const first = await count(() => store.claim(input(done)));
      assert.deepEqual(first, { readDone: 0, claim: 1 });
      for (let i = 0; i < 30; i++) assert.equal((await store.claim(input(done))).kind, 'exists');
      assert.deepEqual(await count(() => store.claim(input(done))), { readDone: 1, claim: 0 });
      // Reading first, a new key misses the read and is claimed by the claim statement.
      assert.deepEqual(await count(() => claimAndFinish(`after-${randomUUID()}`)), { readDone: 1, claim: 1 });
      for (let i = 0; i < 30; i++) await claimAndFinish(`more-${i}-${randomUUID()}`);
      assert.deepEqual(await count(() => claimAndFinish(`last-${randomUUID()}`)), { readDone: 0, claim: 1 });
    });

    it('both paths report the same record: a finished key (also for another fingerprint) and a key in progress', async () => {
      const done = `d-${randomUUID()}`;
      const started = `s-${randomUUID()}`;
      await claimAndFinish(done);
      assert.equal((await store.claim(input(started))).kind, 'claimed');
      for (let i = 0; i < 30; i++) await claimAndFinish(`n-${i}-${randomUUID()}`); // claim first now
      const viaClaim = [await store.claim(input(done)), await store.claim(input(done, fp(2))), await store.claim(input(started))];
      for (let i = 0; i < 30; i++) await store.claim(input(done)); // read first now
      const sentBefore = sent.length;
      const viaRead = [await store.claim(input(done)), await store.claim(input(done, fp(2))), await store.claim(input(started))];
      assert.ok(sent.slice(sentBefore).includes(sql.readDone), 'the second round reads first');
      for (const [a, b] of viaClaim.map((r, i) => [r, viaRead[i]!] as const)) {
        assert.equal(a.kind, 'exists');
        assert.equal(b.kind, 'exists');
        const ra = (a as { record: KeyRecord }).record;
        const rb = (b as { record: KeyRecord }).record;
        // The lease and retention left shrink between the two reads; every other field is the same.
        assert.ok(Math.abs(ra.leaseRemainingMs - rb.leaseRemainingMs) < 30_000);
        assert.equal(ra.retentionRemainingMs === undefined, rb.retentionRemainingMs === undefined);
        assert.deepEqual({ ...ra, leaseRemainingMs: 0, retentionRemainingMs: 0 }, { ...rb, leaseRemainingMs: 0, retentionRemainingMs: 0 });
      }
      assert.equal((viaRead[2] as { record: { state: string } }).record.state, 'started');
    });

    it('reading first: a sealed out-of-line response with phase results reads back as via the claim; a finished key past retention is claimed anew, never replayed', async () => {
      const sealed = new PostgresStore({
        client: opened.client as never,
        table: fresh.table,
        inlineMaxBytes: 2,
        encryption: { keys: { k1: randomBytes(32) }, currentKeyId: 'k1' },
      });
      const ctx = (sealed as unknown as { ctx: StoreContext }).ctx;
      const key = `sealed-${randomUUID()}`;
      const r = await sealed.claim(input(key));
      assert.equal(r.kind, 'claimed');
      const token = (r as { token: number }).token;
      const phase: CommitRecord = { kind: 'phase', phase: 'charged', result: { id: 'ch_1', n: [1, 2] }, leaseMs: 60_000 };
      assert.equal((await sealed.commit({ scope: 's', key, token }, () => phase)).kind, 'ok');
      assert.equal((await sealed.commit({ scope: 's', key, token }, finish)).kind, 'ok');
      pinClaimPath(ctx, false);
      const viaClaim = await sealed.claim(input(key));
      pinClaimPath(ctx, true);
      sent.length = 0;
      const viaRead = await sealed.claim(input(key));
      assert.ok(sent.includes(sql.readDone) && !sent.includes(sql.claim), 'answered by readDone alone');
      const ra = (viaClaim as { record: KeyRecord }).record;
      const rb = (viaRead as { record: KeyRecord }).record;
      assert.equal(rb.sealed, true);
      assert.deepEqual(rb.response, { status: 201, headers: [['content-type', 'text/plain']], body: new Uint8Array([1, 2, 3]) });
      assert.deepEqual(rb.phaseResults, { charged: { id: 'ch_1', n: [1, 2] } });
      assert.deepEqual({ ...ra, retentionRemainingMs: 0 }, { ...rb, retentionRemainingMs: 0 });
      // Past retention (1 ms, once the database clock has moved past it) the read returns no row: the claim replaces it.
      const db = opened.client as unknown as { query(t: string, p: unknown[]): Promise<{ rows: Array<{ past: boolean }> }> };
      const pastRetention = `SELECT created_at < now() - interval '5 milliseconds' AS past FROM "${fresh.table}" WHERE scope = 's' AND key = $1`;
      while (!(await db.query(pastRetention, [key])).rows[0]!.past);
      sent.length = 0;
      const again = await sealed.claim({ ...input(key), retentionMs: 1 });
      assert.equal(again.kind, 'claimed', 'a finished key past retention is not replayed');
      assert.ok(sent.includes(sql.readDone) && sent.includes(sql.claim));
      assert.notEqual((again as { token: number }).token, token);
      pinClaimPath(ctx, undefined);
    });
  });
}

describe('a record read on a session with another TimeZone and DateStyle (PostgreSQL)', { skip: needs('DATABASE_URL') }, () => {
  it("reports the row's created_at as the instant it is, by the claim, the read-first path and get", async () => {
    // A timestamptz sent as text follows the session's DateStyle ('SQL, DMY': 03/12/2026 …) and zone.
    const pool = new pg.Pool({ connectionString: serviceUrl('DATABASE_URL'), options: '-c TimeZone=Asia/Kathmandu -c DateStyle=SQL,DMY', max: 2 });
    const { store, drop } = await freshStore(pool);
    try {
      const key = `tz-${randomUUID()}`;
      const before = Date.now();
      const r = await store.claim(input(key));
      assert.equal(r.kind, 'claimed');
      assert.equal((await store.commit({ scope: 's', key, token: (r as { token: number }).token }, finish)).kind, 'ok');
      const after = Date.now();
      const ctx = (store as unknown as { ctx: StoreContext }).ctx;
      pinClaimPath(ctx, false);
      const viaClaim = await store.claim(input(key));
      pinClaimPath(ctx, true);
      const viaRead = await store.claim(input(key));
      const viaGet = await store.get('s', key, 60_000);
      for (const [path, createdAt] of [
        ['claim', (viaClaim as { record: KeyRecord }).record.createdAt],
        ['read first', (viaRead as { record: KeyRecord }).record.createdAt],
        ['get', viaGet!.createdAt],
      ] as const) {
        // The database's clock and ours may differ a little; an hour's offset or a swapped day and month may not.
        assert.ok(Math.abs(createdAt.getTime() - (before + after) / 2) < 60_000, `${path}: ${createdAt.toISOString()} is not now`);
      }
    } finally {
      await drop();
      await pool.end();
    }
  });
});
