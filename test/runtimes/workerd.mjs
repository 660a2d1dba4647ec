/**
 * The runtime matrix on workerd (scripts/runtimes.sh): the Worker examples bundled with esbuild as
 * a user's build would, run by Miniflare (workerd itself, `nodejs_compat`), and driven through
 * Miniflare's dispatchFetch (worker-checks.mjs): the first 201, a byte-identical replay marked
 * `Idempotent-Replayed`, 422 for the same key with another body, one run for 32 concurrent
 * duplicates. Three Workers:
 * examples/workers/worker.ts on the memory store, examples/workers/durable-object.ts on the
 * Durable Objects store (`idem/cloudflare`, its `IdemKeyObject` SQLite-backed), and
 * examples/workers/d1.ts on the D1 store (`D1Store`, a Miniflare D1 database).
 * Usage: node workerd.mjs <the miniflare package directory> <the esbuild package directory>
 */
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { checkWorker, workerBuild } from './worker-checks.mjs';

const [miniflareDir, esbuildDir] = process.argv.slice(2);
const load = async (dir) => import(pathToFileURL(createRequire(join(dir, 'package.json')).resolve(dir)).href);
const { Miniflare } = await load(miniflareDir);
const esbuild = await load(esbuildDir);
const bundle = async (entry) => (await esbuild.build(workerBuild(entry))).outputFiles[0].text;

const workers = [
  { name: 'memory store', entry: 'worker.ts', path: '/charges', effects: '/runs' },
  {
    name: 'Durable Objects store',
    entry: 'durable-object.ts',
    path: '/charges',
    effects: '/charges/count',
    durableObjects: { IDEM: { className: 'IdemKeyObject', useSQLite: true } },
  },
  { name: 'D1 store', entry: 'd1.ts', path: '/charges', effects: '/charges/count', d1Databases: ['DB'] },
];
let failed = false;
for (const worker of workers) {
  const mf = new Miniflare({
    modules: true,
    script: await bundle(worker.entry),
    compatibilityDate: '2026-07-30',
    compatibilityFlags: ['nodejs_compat'],
    ...(worker.durableObjects && { durableObjects: worker.durableObjects }),
    ...(worker.d1Databases && { d1Databases: worker.d1Databases }),
  });
  try {
    await checkWorker(mf, worker.path, worker.effects);
    console.log(`ok - workerd (Miniflare): ${worker.name}: replay, mismatch and 32 concurrent duplicates through the fetch handler`);
  } catch (error) {
    failed = true;
    console.log(`not ok - workerd (Miniflare): ${worker.name}: ${String(error?.stack ?? error)}`);
  } finally {
    await mf.dispose();
  }
}
process.exit(failed ? 1 : 0);
