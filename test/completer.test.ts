/**
 * The completer (issue 4) on a real store (PGlite always, PostgreSQL when DATABASE_URL is
 * set): abandoned keys are taken over and finished from their recovery point, with the
 * stored request; keys that never ran are discarded; two completers never drive one key; a
 * stale worker's writes after the completer took over are fenced.
 */
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { engines, freshStore } from './helpers/engines.js';
import { sleep } from './helpers/wait.js';
import { HttpIdempotency, type Prepared } from '../src/http/idempotency.js';
import { Completer } from '../src/http/completer.js';
import type { IdempotencyContext } from '../src/http/context.js';
import type { Queryable } from '../src/postgres/client.js';
import { InvalidOptionError, LeaseLostError } from '../src/core/errors.js';

const LEASE_MS = 150;
type Ctx = IdempotencyContext<Queryable>;

const request = (key: string, body = '{"amount":5}') => ({
  method: 'POST',
  url: 'http://example.test/v1/charges?x=1',
  headers: new Headers({ 'content-type': 'application/json', authorization: 'Bearer secret', 'idempotency-key': key }),
  body: new TextEncoder().encode(body),
});

function execute(prepared: Prepared<Queryable>): Extract<Prepared<Queryable>, { kind: 'execute' }> {
  assert.equal(prepared.kind, 'execute', `expected execute, got ${prepared.kind}`);
  return prepared as Extract<Prepared<Queryable>, { kind: 'execute' }>;
}

for (const engineDef of engines) {
  describe(`Completer on ${engineDef.name}`, () => {
    let db: Awaited<ReturnType<typeof engineDef.open>>;
    let ctx: Awaited<ReturnType<typeof freshStore>>;
    let http: HttpIdempotency<Queryable>;
    /** Side effects of the handler, as a PSP and a ledger would see them. */
    let calls: Array<{ phase: string; arg: string }>;

    /** The route: a phase, a downstream call with its derived key, a finish. */
    const route = async (req: Request, idem: Ctx): Promise<Response> => {
      const body = (await req.json()) as { amount: number };
      const created = await idem.phase('created', async () => {
        calls.push({ phase: 'created', arg: String(body.amount) });
        return { id: 'c1' };
      });
      const paid = await idem.call('paid', async (derivedKey) => {
        calls.push({ phase: 'paid', arg: derivedKey });
        return { psp: 'p-' + derivedKey.slice(0, 6) };
      });
      return new Response(
        JSON.stringify({ ...created, ...paid, url: new URL(req.url).pathname + new URL(req.url).search, type: req.headers.get('content-type') }),
        {
          status: 201,
          headers: { 'content-type': 'application/json' },
        },
      );
    };

    before(async () => {
      db = await engineDef.open();
    });
    after(async () => {
      await db.close();
    });
    beforeEach(async () => {
      ctx = await freshStore(db.client);
      http = new HttpIdempotency<Queryable>({ store: ctx.store, leaseMs: LEASE_MS, heartbeatMs: 0, storeRequests: true });
      calls = [];
    });
    afterEach(async () => {
      await ctx.drop();
    });

    const completer = () => new Completer<Queryable>({ http, run: route });

    it('finishes a key abandoned after its first phase: the phase is skipped, the call made once more with the same derived key, the retry replays', async () => {
      const first = execute(await http.prepare(request('k1')));
      await first.context.phase('created', async () => {
        calls.push({ phase: 'created', arg: '5' });
        return { id: 'c1' };
      });
      const derived = first.context.derivedKey('paid');
      await sleep(LEASE_MS + 50); // the worker "crashed": its lease runs out, no retry comes
      const report = await completer().runOnce();
      assert.deepEqual(report, { found: 1, completed: 1, discarded: 0, failed: 0, lost: 0, skipped: 0 });
      assert.deepEqual(
        calls,
        [
          { phase: 'created', arg: '5' },
          { phase: 'paid', arg: derived },
        ],
        'created not repeated; paid with the original derived key',
      );
      const retry = await http.prepare(request('k1'));
      assert.equal(retry.kind, 'respond');
      const replay = (retry as { response: Response }).response;
      assert.equal(replay.status, 201);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(
        await replay.json(),
        { id: 'c1', psp: 'p-' + derived.slice(0, 6), url: '/v1/charges?x=1', type: 'application/json' },
        'path, query, content type and body came from the snapshot',
      );
      const stored = (await ctx.store.listAbandoned({ limit: 10, graceMs: 0, retentionMs: 60_000 })).length;
      assert.equal(stored, 0, 'nothing left abandoned');
      // The stale worker wakes up: its writes are fenced.
      await assert.rejects(
        first.context.phase('late', async () => 1),
        LeaseLostError,
      );
    });

    it('never stores credentials in the snapshot', async () => {
      execute(await http.prepare(request('k1')));
      const row = (await (db.client as Queryable).query(`SELECT request::text AS r FROM "${ctx.table}"`)).rows[0];
      assert.ok(row && typeof row.r === 'string', 'a snapshot was stored');
      assert.doesNotMatch(String(row.r), /secret|authorization|idempotency-key/i);
    });

    it('runs a key with a stored request but no committed phase from the start, with its original claim (same derived key)', async () => {
      const first = execute(await http.prepare(request('k1')));
      const derived = first.context.derivedKey('paid');
      await sleep(LEASE_MS + 50);
      assert.equal((await completer().runOnce()).completed, 1);
      assert.deepEqual(calls, [
        { phase: 'created', arg: '5' },
        { phase: 'paid', arg: derived },
      ]);
    });

    it('discards a key whose request was never stored and where nothing committed: the retry starts fresh', async () => {
      const plain = new HttpIdempotency<Queryable>({ engine: http.engine });
      const scope = execute(await plain.prepare(request('k1'))).context.scope;
      assert.ok(await ctx.store.get(scope, 'k1', 60_000), 'claimed');
      await sleep(LEASE_MS + 50);
      assert.deepEqual(await completer().runOnce(), { found: 1, completed: 0, discarded: 1, failed: 0, lost: 0, skipped: 0 });
      assert.equal(await ctx.store.get(scope, 'k1', 60_000), undefined, 'the key is gone');
      assert.equal(execute(await http.prepare(request('k1'))).context.resumed, false, 'a retry claims afresh');
    });

    it('keeps a key whose stalled worker saved its request after the listing: the retry keeps its claim and derived key (docs/model finding)', async () => {
      const plain = new HttpIdempotency<Queryable>({ engine: http.engine });
      const first = execute(await plain.prepare(request('k1')));
      const scope = first.context.scope;
      const ref = { scope, key: 'k1', token: first.context.execution.token };
      const derived = first.context.derivedKey('paid');
      await sleep(LEASE_MS + 50); // the worker stalls past its lease right after its claim
      const store = ctx.store;
      const list = store.listAbandoned.bind(store);
      store.listAbandoned = async (options) => {
        const found = await list(options);
        // Between the listing and the completer's decision the worker wakes up: it saves its
        // request and calls the PSP with its derived key (a handler whose first step is a call).
        const saved = await store.saveRequest(ref, {
          method: 'POST',
          url: '/v1/charges?x=1',
          contentType: 'application/json',
          body: new TextEncoder().encode('{"amount":5}'),
        });
        assert.equal(saved.kind, 'ok');
        calls.push({ phase: 'paid', arg: derived });
        return found;
      };
      assert.deepEqual(
        await completer().runOnce(),
        { found: 1, completed: 0, discarded: 0, failed: 0, lost: 1, skipped: 0 },
        'listed without a request, but not discarded',
      );
      store.listAbandoned = list;
      assert.ok(await store.get(scope, 'k1', 60_000), 'the key stays');
      assert.equal((await completer().runOnce()).completed, 1, 'the next pass runs the stored request');
      assert.deepEqual(
        calls.filter((c) => c.phase === 'paid').map((c) => c.arg),
        [derived, derived],
        'the same derived key both times: the PSP dedupes',
      );
    });

    it('skips a key with committed work but no stored request (left to a client retry)', async () => {
      const plain = new HttpIdempotency<Queryable>({ engine: http.engine });
      const first = execute(await plain.prepare(request('k1')));
      await first.context.phase('created', async () => ({ id: 'c1' }));
      await sleep(LEASE_MS + 50);
      assert.deepEqual(await completer().runOnce(), { found: 1, completed: 0, discarded: 0, failed: 0, lost: 0, skipped: 1 });
    });

    it('lets two completers racing over the same keys drive each key once', async () => {
      for (let i = 0; i < 6; i++) execute(await http.prepare(request(`k${i}`, `{"amount":${i + 1}}`)));
      await sleep(LEASE_MS + 50);
      const [a, b] = await Promise.all([completer().runOnce(), completer().runOnce()]);
      assert.equal(a.completed + b.completed, 6, `every key completed once: ${JSON.stringify([a, b])}`);
      assert.equal(calls.filter((c) => c.phase === 'created').length, 6, 'each handler phase ran exactly once');
    });

    it('releases the lease when the run throws, keeping the recovery point for the next pass', async () => {
      execute(await http.prepare(request('k1')));
      await sleep(LEASE_MS + 50);
      let fail = true;
      const flaky = new Completer<Queryable>({
        http,
        run: async (req, idem) => {
          await idem.phase('created', async () => ({ id: 'c1' }));
          if (fail) throw new Error('PSP down');
          return route(req, idem);
        },
      });
      const quiet = console.error;
      console.error = () => undefined;
      try {
        assert.equal((await flaky.runOnce()).failed, 1);
      } finally {
        console.error = quiet;
      }
      fail = false;
      assert.equal((await flaky.runOnce()).completed, 1, 'released at once: the next pass finishes it');
    });

    it('refuses storeRequests on a store without saveRequest', () => {
      const bare = { claim: ctx.store.claim.bind(ctx.store) } as unknown as typeof ctx.store;
      assert.throws(() => new HttpIdempotency<Queryable>({ store: bare, storeRequests: true }), InvalidOptionError);
    });
  });
}
