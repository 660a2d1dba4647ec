/**
 * The Durable Objects store (`idem/cloudflare`) beyond the store contract (which runs over it in
 * test/store-contract.test.ts): the Worker example examples/workers/durable-object.ts bundled
 * from source and run in workerd through Miniflare (one effect and a byte-identical replay for a
 * retried POST, 422 for another body, one run for 32 concurrent duplicates), a takeover after
 * the lease that fences the late writer, and the retention alarm that deletes a key in its
 * object. Full tier, with the runtime matrix's Miniflare (.ci/runtimes).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { claimedToken, claimInput } from './contracts/store.js';
import { DurableObjectStore } from '../src/cloudflare/index.js';
import { ErrorCode, InvalidOptionError } from '../src/core/errors.js';
import { bundleWorker, durableObjectFactories, miniflareMissing, startMiniflare } from './helpers/durable-object-stores.js';
import { fencesLateWriter, response } from './helpers/late-writer.js';
import type { StoreBackend, StoreHarness } from './helpers/stores.js';
import { checkWorker } from './runtimes/worker-checks.mjs';

const SCOPE = 'tenant-1';

describe('the Worker example on Durable Objects (Miniflare)', { skip: miniflareMissing() }, () => {
  let mf: Awaited<ReturnType<typeof startMiniflare>>;
  before(async () => {
    const script = await bundleWorker(join(import.meta.dirname, '..', 'examples', 'workers', 'durable-object.ts'));
    mf = await startMiniflare(script, { IDEM: { className: 'IdemKeyObject', useSQLite: true } });
  });
  after(() => mf?.dispose());

  it('charges once for a retried POST and replays the first 201 byte for byte; another body is a 422; 32 concurrent duplicates charge once', () =>
    checkWorker(mf, '/charges', '/charges/count'));
});

describe('DurableObjectStore: takeover and retention in the key object (Miniflare)', { skip: miniflareMissing() }, () => {
  let backend: StoreBackend;
  let h: StoreHarness;
  before(async () => {
    backend = await durableObjectFactories()[0]!.connect();
    h = await backend.fresh();
  });
  after(() => backend?.close());

  it('fences the late writer after a takeover of its expired lease: its phase, heartbeat, finish and release change nothing', () =>
    fencesLateWriter(h, 'takeover'));

  it("deletes a finished key once its claim's retention is over, by the object's alarm, and a new claim draws a higher token", async () => {
    const store = h.store;
    const token = claimedToken(await store.claim(claimInput('alarm', { retentionMs: 300 })));
    assert.equal((await store.commit({ scope: SCOPE, key: 'alarm', token }, () => ({ kind: 'finish', response: response(3) }))).kind, 'ok');
    // The alarm fires in workerd 300 ms after the claim: wait for its effect, the row gone.
    const deadline = Date.now() + 60_000;
    while ((await h.snapshot(SCOPE, 'alarm')) !== undefined) {
      assert.ok(Date.now() < deadline, 'the retention alarm never deleted the key');
      await new Promise((r) => setTimeout(r, 50));
    }
    const again = claimedToken(await store.claim(claimInput('alarm')));
    assert.ok(again > token, `the new token ${again} exceeds the deleted key's ${token}`);
  });
});

describe('DurableObjectStore: options and the deadline (protocol.md H17)', () => {
  it('refuses a namespace that is not a Durable Object binding, and a bad storeTimeoutMs', () => {
    assert.throws(() => new DurableObjectStore({ namespace: {} as never }), InvalidOptionError);
    const namespace = { idFromName: () => ({}), get: () => ({}) };
    assert.throws(() => new DurableObjectStore({ namespace, storeTimeoutMs: -1 }), InvalidOptionError);
  });

  it('fails a call past storeTimeoutMs with a StoreTimeoutError when the key object never answers', { skip: miniflareMissing() }, async () => {
    const mf = await startMiniflare(await bundleWorker(join(import.meta.dirname, 'helpers', 'durable-object-worker.ts')), {
      IDEM: { className: 'TestKeyObject', useSQLite: true },
    });
    try {
      const store = new DurableObjectStore({ namespace: await mf.getDurableObjectNamespace('IDEM'), storeTimeoutMs: 200 });
      await assert.rejects(store.claim(claimInput('never-answers')), (error: { code?: string }) => error.code === ErrorCode.StoreTimeout);
      assert.equal((await store.claim(claimInput('answers'))).kind, 'claimed', 'another key (another object) answers');
    } finally {
      await mf.dispose();
    }
  });
});
