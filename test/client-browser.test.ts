/**
 * idem/client in a real headless browser (Debian's chromium through playwright-core): an
 * intent persisted in localStorage / IndexedDB survives a page reload that cut its first attempt
 * off after the server committed it, and `resumePending()` on the reloaded page sends it again
 * with the same key and gets the replay; one PSP charge.
 *
 * `idem/client` is bundled for the page with esbuild (platform `browser`: a `node:` import would
 * fail the build). The page, the bundle and the API are served from one origin by the recording
 * proxy in front of the real payments server, so no CORS is involved. Skipped, with a message,
 * when /usr/bin/chromium is missing (`.ci/run` installs it).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'esbuild';
import { chromium, type BrowserContext } from 'playwright-core';
import { fullMatrixOnly } from './helpers/services.js';
import {
  backends,
  pspCharges,
  rand,
  sleep,
  startPaymentsServer,
  startRecordingProxy,
  ROOT,
  type PaymentsServer,
  type RecordingProxy,
} from './helpers/client-harness.js';

const CHROMIUM = '/usr/bin/chromium';
const skip = existsSync(CHROMIUM) ? false : `${CHROMIUM} is missing: install it with \`apt-get install -y chromium\` (.ci/run does)`;
const T = { timeout: 120_000 };

const PAGE = `<!doctype html><meta charset="utf-8"><title>idem client</title><script src="/client.js"></script>`;

/** What the page sees of the bundle (`window.idem`, an IIFE of src/client/index.ts). */
declare const idem: typeof import('../src/client/index.js');

type StoreKind = 'localStorage' | 'indexedDB';

// A browser per test: the full matrix only (npm run test:all); test/client.test.ts runs the same client in Node.
describe('idem/client in headless chromium', { skip: fullMatrixOnly() || skip }, () => {
  let bundle = '';
  before(async () => {
    const out = await build({
      stdin: { contents: `export * from './src/client/index.ts';`, resolveDir: ROOT, sourcefile: 'entry.ts', loader: 'ts' },
      bundle: true,
      format: 'iife',
      globalName: 'idem',
      platform: 'browser',
      target: 'es2022',
      write: false,
      logLevel: 'silent',
    });
    bundle = out.outputFiles[0]!.text;
  });

  test('the browser bundle of idem/client has no node: import', () => {
    assert.ok(bundle.length > 1000, 'bundle built');
    assert.doesNotMatch(bundle, /["']node:/, 'no node: module in the browser bundle');
  });

  for (const backend of backends()) {
    describe(backend.name, () => {
      let server: PaymentsServer;
      let context: BrowserContext;
      const userDataDir = mkdtempSync(join(tmpdir(), 'idem-chromium-'));

      before(
        async () => {
          const [started, launched] = await Promise.all([
            (async () => startPaymentsServer({ ...(await backend.create()), PSP_LATENCY_MS: '200' }))(),
            chromium.launchPersistentContext(userDataDir, {
              executablePath: CHROMIUM,
              headless: true,
              args: [
                '--no-sandbox',
                '--disable-gpu',
                '--disable-dev-shm-usage',
                '--disable-quic',
                '--no-first-run',
                '--disable-background-networking',
                '--disable-component-update',
                '--disable-sync',
              ],
            }),
          ]);
          server = started;
          context = launched;
        },
        { timeout: 150_000 },
      );
      after(async () => {
        await context?.close();
        await server?.stop();
        await backend.drop();
        rmSync(userDataDir, { recursive: true, force: true });
      });

      for (const kind of ['localStorage', 'indexedDB'] as const) {
        test(`${kind}: an intent cut off by a reload after the server committed is resumed with the same key; one PSP charge`, T, async () => {
          const apiKey = `sk_test_${rand()}`;
          const customer = `cus_browser_${kind}_${rand()}`;
          let posts = 0;
          const proxy: RecordingProxy = await startRecordingProxy({
            upstream: server.url,
            // The first charge request reaches the server and is committed, but its answer never
            // reaches the page: the page is reloaded meanwhile.
            fate: (req) => (req.method === 'POST' && posts++ === 0 ? 'hang' : 'pass'),
            serve: (req, res) => {
              if (req.url === '/') res.writeHead(200, { 'content-type': 'text/html' }).end(PAGE);
              else if (req.url === '/client.js') res.writeHead(200, { 'content-type': 'text/javascript' }).end(bundle);
              else return false;
              return true;
            },
          });
          const page = await context.newPage();
          try {
            await page.goto(proxy.url);
            const options = { kind, apiKey, customer };
            const key = await page.evaluate(async ({ kind, apiKey, customer }: { kind: StoreKind; apiKey: string; customer: string }) => {
              const store = kind === 'localStorage' ? new idem.LocalStorageIntentStore() : new idem.IndexedDbIntentStore({ dbName: `idem-${customer}` });
              const client = new idem.IdempotentClient({ store, headers: { authorization: `Bearer ${apiKey}` } });
              const intent = await client.createIntent('/v1/charges', {
                method: 'POST',
                headers: { 'content-type': 'application/json' },
                body: JSON.stringify({ amount: 4100, currency: 'eur', customer }),
              });
              void client.send(intent.key).catch(() => undefined); // cut off by the reload
              return intent.key;
            }, options);

            const firstPost = () => proxy.seen.find((s) => s.method === 'POST');
            const deadline = Date.now() + 30_000;
            while (firstPost()?.status === undefined && Date.now() < deadline) await sleep(25);
            assert.equal(
              firstPost()?.status,
              201,
              `the server committed the first attempt; proxy saw: ${JSON.stringify(proxy.seen.map((s) => [s.method, s.path, s.status, s.key]))}`,
            );
            assert.equal(firstPost()!.key, key, 'the first attempt carried the minted key');
            await page.reload();

            const resumed = await page.evaluate(async ({ kind, apiKey, customer }: { kind: StoreKind; apiKey: string; customer: string }) => {
              const store = kind === 'localStorage' ? new idem.LocalStorageIntentStore() : new idem.IndexedDbIntentStore({ dbName: `idem-${customer}` });
              const before = await store.list();
              const client = new idem.IdempotentClient({ store, headers: { authorization: `Bearer ${apiKey}` } });
              const results = await client.resumePending();
              const out = [];
              for (const r of results)
                out.push(
                  r.ok
                    ? { key: r.key, status: r.response.status, replayed: r.response.replayed, body: await r.response.text() }
                    : { key: r.key, error: String(r.error) },
                );
              return { before, results: out, after: await store.list() };
            }, options);

            assert.deepEqual(
              resumed.before.map((r) => [r.key, r.state, r.attempts, r.headers.some(([n]) => n === 'authorization')]),
              [[key, 'pending', 1, false]],
              `the intent survived the reload in ${kind}, pending after one attempt, without the credential`,
            );
            assert.equal(resumed.results.length, 1, `one intent resumed: ${JSON.stringify(resumed.results)}`);
            const [result] = resumed.results as Array<{ key: string; status: number; replayed: boolean; body: string }>;
            assert.equal(result!.key, key, 'resumed under the original key');
            assert.equal(result!.status, 201, `201: ${result!.body}`);
            assert.equal(result!.replayed, true, 'the replay of the committed first attempt');
            assert.equal(result!.body, firstPost()!.responseBody!.toString(), 'the response the page never got, byte for byte');
            const posts = proxy.seen.filter((s) => s.method === 'POST');
            assert.deepEqual(
              posts.map((s) => s.key),
              [key, key],
              'two attempts, one key',
            );
            assert.ok(posts[1]!.body.equals(posts[0]!.body), 'identical body bytes after the reload');
            assert.deepEqual(resumed.after, [], 'the finished intent was pruned');
            assert.equal((await pspCharges(server.url, customer)).length, 1, 'exactly one PSP charge');
          } finally {
            await page.close();
            await proxy.close();
          }
        });
      }
    });
  }
});
