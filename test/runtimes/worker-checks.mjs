/**
 * What every Worker example must do in workerd (Miniflare), shared by test/runtimes/workerd.mjs
 * (the packed package) and test/durable-object-store.test.ts (the source): how a user's build
 * bundles it, and the checks through Miniflare's dispatchFetch: the first 201, a byte-identical
 * replay marked `Idempotent-Replayed`, 422 for the same key with another body, one run for 32
 * concurrent duplicates.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';

/** esbuild's options for a Worker entry, as wrangler bundles it (`cloudflare:workers` and `node:*` stay external). */
export const workerBuild = (entry) => ({
  entryPoints: [entry],
  bundle: true,
  format: 'esm',
  platform: 'neutral',
  conditions: ['workerd', 'worker', 'browser', 'import'],
  mainFields: ['module', 'main'],
  external: ['node:*', 'cloudflare:workers'],
  write: false,
});

/** The checks on one Worker; `effects` is the GET path whose JSON's one value counts the runs of the work. */
export async function checkWorker(mf, path, effects) {
  const post = (key, body) =>
    mf.dispatchFetch(`http://worker${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
    });
  const runs = async () => Object.values(await (await mf.dispatchFetch(`http://worker${effects}`)).json())[0];
  const before = await runs();
  const key = randomUUID();
  const first = await post(key, { amount: 100 });
  assert.equal(first.status, 201);
  const firstBody = await first.text();
  const again = await post(key, { amount: 100 });
  assert.equal(again.status, 201);
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.equal(await again.text(), firstBody, 'the replay is byte for byte the first answer');
  const other = await post(key, { amount: 999 });
  assert.equal(other.status, 422);
  assert.match(other.headers.get('content-type') ?? '', /application\/problem\+json/);
  await other.text();
  assert.equal(await runs(), before + 1, 'the retried POST ran the work once');
  const dup = randomUUID();
  const answers = await Promise.all(Array.from({ length: 32 }, () => post(dup, { amount: 7 })));
  const statuses = answers.map((r) => r.status);
  await Promise.all(answers.map((r) => r.text()));
  assert.equal(await runs(), before + 2, `32 concurrent duplicates ran the work once (statuses ${statuses.join(',')})`);
  assert.ok(
    statuses.every((s) => s === 201 || s === 409),
    `every duplicate got 201 or 409: ${statuses.join(',')}`,
  );
}
