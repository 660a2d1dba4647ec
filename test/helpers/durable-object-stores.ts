/**
 * The Durable Objects store (`idem/cloudflare`) in the store list (stores.ts): the real
 * `IdemKeyObject` (with the backdoors of durable-object-worker.ts) runs in workerd through
 * Miniflare, SQLite-backed and key-value-backed; `DurableObjectStore` runs in this process and
 * calls it over RPC through Miniflare's namespace proxy, as a Worker calls its binding. Every
 * `fresh()` names its objects under a new prefix, so it starts empty.
 *
 * Miniflare is the runtime matrix's (.ci/runtimes, installed by scripts/runtimes.sh); without it,
 * or outside IDEM_TEST_TIER=all, these entries are left out.
 */
import { existsSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import * as esbuild from 'esbuild';
import { DurableObjectStore } from '../../src/cloudflare/index.js';
import type { DurableObjectNamespaceLike } from '../../src/cloudflare/workers-types.js';
import type { D1DatabaseLike } from '../../src/cloudflare/d1-types.js';
import type { NoTransaction } from '../../src/redis/no-transaction.js';
import type { StoreFactory, StoreHarness } from './stores.js';
import { workerBuild } from '../runtimes/worker-checks.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
/** Where the runtime matrix installs Miniflare; IDEM_MINIFLARE_DIR overrides it. */
export const MINIFLARE_DIR = process.env.IDEM_MINIFLARE_DIR ?? join(ROOT, '.ci', 'runtimes', 'node_modules', 'miniflare');

/** The slice of Miniflare 4 used here. */
export interface MiniflareLike {
  dispatchFetch(url: string, init?: RequestInit): Promise<Response>;
  getDurableObjectNamespace(binding: string): Promise<DurableObjectNamespaceLike<unknown>>;
  getD1Database(binding: string): Promise<D1DatabaseLike>;
  dispose(): Promise<void>;
}
interface Backdoors {
  testAge(ms: number): Promise<void>;
  testSetLease(ms: number): Promise<void>;
  testBumpToken(): Promise<void>;
  testRow(): Promise<string | null>;
  testAlarm(): Promise<void>;
}

/** The test Worker bundled as a user's build would (esbuild, `cloudflare:workers` external). */
export async function bundleWorker(entry: string): Promise<string> {
  // `idem/x` from this repository's source, as the packed package maps it (package.json "exports").
  const out = (await esbuild.build({ ...workerBuild(entry), alias: { idem: join(ROOT, 'src') }, write: false })) as esbuild.BuildResult & {
    outputFiles: esbuild.OutputFile[];
  };
  return out.outputFiles[0]!.text;
}

/**
 * Miniflare from the runtime matrix, running `script` with `durableObjects`; `more` adds options
 * (`d1Databases`, `d1Persist`, `durableObjectsPersist`).
 */
export async function startMiniflare(script: string, durableObjects: Record<string, unknown>, more: Record<string, unknown> = {}): Promise<MiniflareLike> {
  const require = createRequire(join(MINIFLARE_DIR, 'package.json'));
  const { Miniflare } = (await import(pathToFileURL(require.resolve(MINIFLARE_DIR)).href)) as { Miniflare: new (o: unknown) => MiniflareLike };
  return new Miniflare({ modules: true, script, compatibilityDate: '2026-07-30', compatibilityFlags: ['nodejs_compat'], durableObjects, ...more });
}

function durableObjectFactory(name: string, useSQLite: boolean): StoreFactory {
  return {
    name,
    contractOnly: true,
    capabilities: { sweep: false, partitioned: false, sql: false, virtualTime: false, atomicEffects: false, completion: false },
    async connect() {
      const script = await bundleWorker(join(ROOT, 'test/helpers/durable-object-worker.ts'));
      const mf = await startMiniflare(script, { IDEM: { className: 'TestKeyObject', useSQLite } });
      const ns = await mf.getDurableObjectNamespace('IDEM');
      return {
        close: () => mf.dispose(),
        async fresh() {
          const prefix = randomUUID();
          const names = new Set<string>();
          const namespace: DurableObjectNamespaceLike<unknown> = {
            idFromName: (n) => {
              names.add(n);
              return ns.idFromName(prefix + n);
            },
            get: (id) => ns.get(id),
          };
          const store = new DurableObjectStore({ namespace });
          const object = (scope: string, key: string) => ns.get(ns.idFromName(prefix + JSON.stringify([scope, key]))) as unknown as Backdoors;
          const row = async (scope: string, key: string) => {
            const text = await object(scope, key).testRow();
            return text === null ? undefined : (JSON.parse(text) as Record<string, unknown>);
          };
          const allRows = async () => {
            const rows = [];
            for (const n of names) {
              const [scope, key] = JSON.parse(n) as [string, string];
              const r = await row(scope, key);
              if (r) rows.push(r);
            }
            return rows;
          };
          const notes: string[] = [];
          const harness: StoreHarness<NoTransaction> = {
            store,
            effect: (note) => async () => {
              notes.push(note);
              return { note };
            },
            effects: async () => [...notes],
            age: (scope, key, ms) => object(scope, key).testAge(ms),
            setLease: (scope, key, ms) => object(scope, key).testSetLease(ms),
            tokenOf: async (scope, key) => (await row(scope, key))?.token as number | undefined,
            snapshot: (scope, key) => row(scope, key),
            count: async () => (await allRows()).length,
            staleInTx: (_tx, scope, key) => object(scope, key).testBumpToken(),
            dump: async () => (await allRows()).map((r) => JSON.stringify(r)).join('\n'),
            rows: async () => {
              const hex = (b: unknown) => Buffer.from(b as number[]).toString('hex');
              return (await allRows())
                .map((r) => {
                  const response = r.response as { status: number; headers: Array<[string, string]>; body: number[] } | undefined;
                  return {
                    scope: String(r.scope),
                    key: String(r.key),
                    state: String(r.state),
                    recovery_point: String(r.recoveryPoint),
                    lock_version: String(r.token),
                    fingerprint: hex(r.fingerprint),
                    response_status: response?.status ?? null,
                    response_body: response ? hex(response.body) : null,
                    response_headers: response?.headers ?? null,
                    locked: typeof r.lockedUntil === 'number' && r.lockedUntil > Date.now(),
                  };
                })
                .sort((a, b) => (`${a.scope}\u0000${a.key}` < `${b.scope}\u0000${b.key}` ? -1 : 1));
            },
            drop: async () => undefined,
          };
          return harness as StoreHarness;
        },
      };
    },
  };
}

/** node:test's `skip` for a suite in Miniflare: the full tier with the runtime matrix's Miniflare installed. */
export function miniflareMissing(): string | false {
  if (process.env.IDEM_TEST_TIER !== 'all') return 'runs in the full matrix only: npm run test:all (IDEM_TEST_TIER=all)';
  if (!existsSync(MINIFLARE_DIR)) return `Miniflare is not installed at ${MINIFLARE_DIR}: (cd .ci/runtimes && npm ci), as .ci/run does`;
  return false;
}

/** The Durable Objects store entries of stores.ts: SQLite-backed and key-value-backed objects. */
export function durableObjectFactories(): StoreFactory[] {
  if (miniflareMissing()) return [];
  return [
    durableObjectFactory('DurableObjectStore (SQLite-backed) in Miniflare', true),
    durableObjectFactory('DurableObjectStore (key-value) in Miniflare', false),
  ];
}

/** The backdoor that runs a key's retention alarm now (test/durable-object-store.test.ts). */
export type { Backdoors as DurableObjectBackdoors };
