/**
 * The crash drill of the Cloudflare stores (protocol.md K52, K57) in Miniflare: a Worker's
 * handler on D1Store, and on DurableObjectStore, commits its first phase and hangs; workerd is
 * then shut down under it (Miniflare `dispose`, the request never answered), and a new Miniflare
 * starts on the same storage on disk (`d1Persist`, `durableObjectsPersist`). The retry after the
 * lease takes the key over with a higher token, resumes after the committed phase (which does not
 * run again), and answers 201; the crashed attempt's token is then refused for every write.
 *
 * What Miniflare cannot simulate: a torn write inside workerd (dispose stops the process between
 * statements; SQLite's journal is what makes a statement all or nothing), a D1 primary moving,
 * or a Durable Object reset by Cloudflare in the middle of an RPC. Full tier, with the runtime
 * matrix's Miniflare (.ci/runtimes).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { D1Store, DurableObjectStore } from '../src/cloudflare/index.js';
import type { IdempotencyStore } from '../src/store/types.js';
import { d1Rows } from './helpers/d1-stores.js';
import { bundleWorker, type MiniflareLike, miniflareMissing, startMiniflare } from './helpers/durable-object-stores.js';

const RETENTION = 86_400_000;

describe('crash drill: workerd shut down mid-handler, a new one on the same storage (Miniflare)', { skip: miniflareMissing() }, () => {
  let script: string;
  let dir: string;
  before(async () => {
    script = await bundleWorker(join(import.meta.dirname, 'helpers', 'cloudflare-crash-worker.ts'));
    dir = mkdtempSync(join(tmpdir(), 'idem-cf-crash-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const start = () =>
    startMiniflare(
      script,
      { IDEM: { className: 'IdemKeyObject', useSQLite: true } },
      { d1Databases: ['DB'], d1Persist: join(dir, 'd1'), durableObjectsPersist: join(dir, 'do') },
    );
  const post = (mf: MiniflareLike, kind: string, key: string, crash = false) =>
    mf.dispatchFetch(`http://worker/${kind}/run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, ...(crash && { 'x-crash': '1' }) },
      body: JSON.stringify({ amount: 5 }),
    });
  const notes = async (mf: MiniflareLike, key: string) =>
    (await d1Rows(await mf.getD1Database('DB'), 'SELECT note FROM drill WHERE key = ? ORDER BY id', [key])).map((r) => String(r.note));
  const storeOn = async (mf: MiniflareLike, kind: string): Promise<IdempotencyStore<unknown>> =>
    (kind === 'd1'
      ? new D1Store({ database: await mf.getD1Database('DB') })
      : new DurableObjectStore({ namespace: await mf.getDurableObjectNamespace('IDEM') })) as IdempotencyStore<unknown>;

  for (const [kind, name] of [
    ['d1', 'D1Store'],
    ['do', 'DurableObjectStore'],
  ] as const) {
    it(`${name}: the retry after the lease runs once with a higher token, resumes after the committed phase, and the crashed attempt's token is refused`, async () => {
      const key = randomUUID();
      const first = await start();
      let token: number;
      try {
        const hung = post(first, kind, key, true);
        hung.catch(() => undefined); // never answered: workerd goes away under it
        // The readiness signal: the handler wrote `hanging` after its first phase committed.
        const deadline = Date.now() + 60_000;
        while (!(await notes(first, key).catch((): string[] => [])).includes('hanging')) {
          assert.ok(Date.now() < deadline, 'the handler never reached its hang');
          await new Promise((r) => setTimeout(r, 25));
        }
        const held = await (await storeOn(first, kind)).get('drill', key, RETENTION);
        assert.equal(held?.recoveryPoint, 'first');
        token = held!.token;
      } finally {
        await first.dispose(); // the crash: workerd stops, the handler never finishes
      }

      const second = await start();
      try {
        // While the crashed attempt's lease lasts, a retry is a 409; after it, the takeover.
        let answer: Response;
        const deadline = Date.now() + 60_000;
        for (;;) {
          answer = await post(second, kind, key);
          if (answer.status !== 409) break;
          await answer.text();
          assert.ok(Date.now() < deadline, 'the retry never took the key over');
          await new Promise((r) => setTimeout(r, 100));
        }
        assert.equal(answer.status, 201, await answer.clone().text());
        assert.deepEqual(await answer.json(), { done: true });
        assert.deepEqual(await notes(second, key), ['first', 'hanging', 'second'], 'the committed phase did not run again; the rest ran once');

        const store = await storeOn(second, kind);
        const record = await store.get('drill', key, RETENTION);
        assert.equal(record?.state, 'done');
        assert.ok(record!.token > token, `the taker's token ${record!.token} exceeds the crashed attempt's ${token}`);
        const late = { scope: 'drill', key, token };
        const done = { status: 201, headers: [] as Array<[string, string]>, body: new Uint8Array([1]) };
        assert.deepEqual(await store.commit(late, () => ({ kind: 'finish', response: done })), { kind: 'fenced' });
        assert.deepEqual(await store.extendLease(late, 60_000), { kind: 'fenced' });
        assert.deepEqual(await store.release(late), { kind: 'fenced' });
        if (kind === 'd1') {
          const db = await second.getD1Database('DB');
          const fenced = await (store as unknown as D1Store).commit(
            late,
            () => ({ kind: 'phase', phase: 'late', result: 1, leaseMs: 60_000 }),
            async (tx) => tx.write(db.prepare('INSERT INTO drill (store, key, note) VALUES (?, ?, ?)').bind(kind, key, 'late')),
          );
          assert.deepEqual(fenced, { kind: 'fenced' });
          assert.ok(!(await notes(second, key)).includes('late'), "the late writer's effect was rolled back with its batch");
        }
        const replay = await post(second, kind, key);
        assert.equal(replay.status, 201);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        await replay.text();
      } finally {
        await second.dispose();
      }
    });
  }
});
