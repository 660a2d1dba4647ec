/**
 * The D1 store (`D1Store`, idem/cloudflare, protocol.md K57) beyond the store contract and the
 * attempt contract (which run over it in Miniflare): the Worker example examples/workers/d1.ts
 * bundled from source and run in workerd (one charge and a byte-identical replay for a retried
 * POST, 422 for another body, one charge for 32 concurrent duplicates), a takeover after the
 * lease that fences the late writer (test/helpers/late-writer.ts, its phase with a D1 write: the
 * batch's guard rolls the write back), a failed write of a phase, and the options it refuses. Full tier, with the runtime matrix's Miniflare.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { D1Store, type D1DatabaseLike, type D1Tx } from '../src/cloudflare/index.js';
import { ErrorCode, InvalidOptionError } from '../src/core/errors.js';
import { claimedToken, claimInput } from './contracts/store.js';
import { D1_WORKER, d1Harness, d1Rows } from './helpers/d1-stores.js';
import { bundleWorker, miniflareMissing, startMiniflare } from './helpers/durable-object-stores.js';
import { fencesLateWriter } from './helpers/late-writer.js';
import type { StoreHarness } from './helpers/stores.js';
import { checkWorker } from './runtimes/worker-checks.mjs';

const SCOPE = 'tenant-1';

describe('the Worker example on D1 (Miniflare)', { skip: miniflareMissing() }, () => {
  let mf: Awaited<ReturnType<typeof startMiniflare>>;
  before(async () => {
    const script = await bundleWorker(join(import.meta.dirname, '..', 'examples', 'workers', 'd1.ts'));
    mf = await startMiniflare(script, {}, { d1Databases: ['DB'] });
  });
  after(() => mf?.dispose());

  it('charges once for a retried POST and replays the first 201 byte for byte; another body is a 422; 32 concurrent duplicates charge once', () =>
    checkWorker(mf, '/charges', '/charges/count'));
});

describe('D1Store: takeover and the phase guard (Miniflare)', { skip: miniflareMissing() }, () => {
  let mf: Awaited<ReturnType<typeof startMiniflare>>;
  let db: D1DatabaseLike;
  let h: StoreHarness<D1Tx>;
  before(async () => {
    mf = await startMiniflare(D1_WORKER, {}, { d1Databases: ['DB'] });
    db = await mf.getD1Database('DB');
    h = await d1Harness(db);
    await d1Rows(db, 'CREATE TABLE late_writes (note TEXT NOT NULL)');
  });
  after(() => mf?.dispose());

  it('fences the late writer after a takeover of its expired lease: its phase (with its D1 write), heartbeat, finish and release change nothing', () =>
    fencesLateWriter(h, 'takeover', {
      write: async (tx: D1Tx) => tx.write(tx.db.prepare('INSERT INTO late_writes (note) VALUES (?)').bind('late')),
      written: async () => (await d1Rows(db, 'SELECT note FROM late_writes')).length,
    }));

  it("rolls the phase's recovery point back when one of its own D1 writes fails, and the error goes on", async () => {
    const store = h.store;
    const token = claimedToken(await store.claim(claimInput('bad-write')));
    const ref = { scope: SCOPE, key: 'bad-write', token };
    await assert.rejects(
      store.commit(
        ref,
        () => ({ kind: 'phase', phase: 'p', result: 1, leaseMs: 60_000 }),
        async (tx) => tx.write(tx.db.prepare('INSERT INTO late_writes (note) VALUES (NULL)')),
      ),
      /NOT NULL constraint failed: late_writes\.note/,
    );
    assert.equal((await store.get(SCOPE, 'bad-write', 60_000))?.recoveryPoint, 'start');
  });
});

describe('D1Store: options and D1 errors', () => {
  const database = { prepare: () => ({}), batch: async () => [] } as unknown as D1DatabaseLike;
  it('refuses a database that is not a D1 binding, a bad table, storeTimeoutMs or waitPoll', () => {
    assert.throws(() => new D1Store({ database: {} as never }), InvalidOptionError);
    assert.throws(() => new D1Store({ database, table: 'keys; DROP TABLE x' }), InvalidOptionError);
    assert.throws(() => new D1Store({ database, storeTimeoutMs: -1 }), InvalidOptionError);
    assert.throws(() => new D1Store({ database, waitPoll: { minMs: 0 } }), InvalidOptionError);
  });

  it("answers D1's overloaded error as the store unavailable for now (retryable), and a call past storeTimeoutMs likewise", async () => {
    const failing = (fn: () => Promise<unknown>) =>
      ({
        prepare: () => {
          const statement = { bind: () => statement, all: fn, run: fn, first: fn };
          return statement;
        },
        batch: fn,
      }) as unknown as D1DatabaseLike;
    const overloaded = new D1Store({ database: failing(() => Promise.reject(new Error('D1_ERROR: D1 DB is overloaded. Too many requests queued.'))) });
    await assert.rejects(
      overloaded.claim(claimInput('k')),
      (error: { code?: string; retryable?: boolean }) => error.code === ErrorCode.StoreTimeout && error.retryable === true,
    );
    const syntax = new D1Store({ database: failing(() => Promise.reject(new Error('D1_ERROR: near "x": syntax error'))) });
    await assert.rejects(syntax.claim(claimInput('k')), /syntax error/);
    const hanging = new D1Store({ database: failing(() => new Promise(() => undefined)), storeTimeoutMs: 50 });
    await assert.rejects(hanging.claim(claimInput('k')), (error: { code?: string }) => error.code === ErrorCode.StoreTimeout);
  });
});
