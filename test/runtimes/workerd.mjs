/**
 * The runtime matrix on workerd (scripts/runtimes.sh): examples/workers/worker.ts bundled with esbuild as a user's
 * build would, run by Miniflare (workerd itself, `nodejs_compat`), and driven through Miniflare's
 * dispatchFetch: the first 201, a byte-identical replay marked `Idempotent-Replayed`, 422 for the
 * same key with another body, one run for 32 concurrent duplicates.
 * Usage: node workerd.mjs <the miniflare package directory> <the esbuild package directory>
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [miniflareDir, esbuildDir] = process.argv.slice(2);
const load = async (dir) => import(pathToFileURL(createRequire(join(dir, 'package.json')).resolve(dir)).href);
const { Miniflare } = await load(miniflareDir);
const esbuild = await load(esbuildDir);

const bundle = await esbuild.build({
  entryPoints: ['worker.ts'],
  bundle: true,
  format: 'esm',
  platform: 'neutral',
  conditions: ['workerd', 'worker', 'browser', 'import'],
  mainFields: ['module', 'main'],
  external: ['node:*'],
  write: false,
});
const mf = new Miniflare({
  modules: true,
  script: bundle.outputFiles[0].text,
  compatibilityDate: '2026-07-30',
  compatibilityFlags: ['nodejs_compat'],
});
let failed = false;
try {
  const version = 'workerd (Miniflare)';
  const post = (key, body) =>
    mf.dispatchFetch('http://worker/charges', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
    });
  const runs = async () => (await (await mf.dispatchFetch('http://worker/runs')).json()).runs;
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
  assert.equal(await runs(), 1);
  const dup = randomUUID();
  const answers = await Promise.all(Array.from({ length: 32 }, () => post(dup, { amount: 7 })));
  const statuses = answers.map((r) => r.status);
  await Promise.all(answers.map((r) => r.text()));
  assert.equal(await runs(), 2, `32 concurrent duplicates ran the work once (statuses ${statuses.join(',')})`);
  assert.ok(
    statuses.every((s) => s === 201 || s === 409),
    `every duplicate got 201 or 409: ${statuses.join(',')}`,
  );
  console.log(`ok - ${version}: memory store: replay, mismatch and 32 concurrent duplicates through the fetch handler`);
} catch (error) {
  failed = true;
  console.log(`not ok - workerd (Miniflare): ${String(error?.stack ?? error)}`);
} finally {
  await mf.dispose();
}
process.exit(failed ? 1 : 0);
