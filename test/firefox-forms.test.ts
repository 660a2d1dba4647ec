/**
 * Browser-generated keys (protocol.md H42): real Firefox ESR (Debian's `firefox-esr`), headless,
 * driven through its built-in WebDriver BiDi by puppeteer-core (no browser download), posts an
 * HTML order form to a Hono app behind idem (memory store) on a real socket.
 *
 * With `network.http.idempotencyKey.enabled`, Firefox adds a random `Idempotency-Key` (an
 * sf-string, `"1234…"`) to a form's POST. What it does, as this test records it:
 * - a reload re-posts the same bytes (the same multipart boundary too) with the same key: the
 *   first response is replayed, one order;
 * - the back button and a second submit is a new submission with a NEW key: a second order. A
 *   site that wants one order there sets the key in the page (a hidden field, read with
 *   `formFieldKey` and `ignoreKeyHeader`): the back button shows the page from its cache, the
 *   second submit carries the same field (and, for multipart, a new boundary, which the
 *   canonical fingerprint ignores) and gets the first response replayed;
 * - with the pref off Firefox sends no key: the header route passes through (a reload orders
 *   twice) and the hidden-field route still replays.
 *
 * Firefox never reaches the internet: every request it makes to anything but 127.0.0.1 goes to a
 * local proxy that answers 403. Skipped, in one line, when /usr/bin/firefox-esr is missing
 * (`.ci/run` installs it).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import type { Browser, Page } from 'puppeteer-core';
import { idempotency } from '../src/hono/index.js';
import { formFieldKey } from '../src/http/index.js';
import { MemoryStore } from '../src/memory/index.js';

const FIREFOX = '/usr/bin/firefox-esr';
const skip = existsSync(FIREFOX) ? false : `${FIREFOX} is missing: install it with \`apt-get install -y firefox-esr\` (.ci/run does)`;
const T = { timeout: 180_000 };

type Enc = 'urlencoded' | 'multipart';
const ENCTYPE: Record<Enc, string> = { urlencoded: 'application/x-www-form-urlencoded', multipart: 'multipart/form-data' };

/** One POST as the server saw it, before idem, and what idem answered. */
interface Seen {
  path: string;
  key: string | null;
  contentType: string;
  status: number;
  replayed: boolean;
}

/** The shop: a form page and its order route, under two key policies. */
function shop() {
  const seen: Seen[] = [];
  const orders: string[] = [];
  const app = new Hono();
  app.use('*', async (c, next) => {
    await next();
    if (c.req.method === 'POST') {
      seen.push({
        path: c.req.path,
        key: c.req.header('idempotency-key') ?? null,
        contentType: c.req.header('content-type') ?? '',
        status: c.res.status,
        replayed: c.res.headers.get('idempotent-replayed') === 'true',
      });
    }
  });
  // Firefox's key: the header idem reads by default.
  app.use('/orders', idempotency({ store: new MemoryStore() }));
  // The page's key: a hidden field; the browser's own header is not read.
  app.use('/page-orders', idempotency({ store: new MemoryStore(), getKey: formFieldKey('idempotency_key'), ignoreKeyHeader: true }));
  const form = (action: string, enc: Enc, hidden: string) =>
    `<!doctype html><meta charset="utf-8"><title>shop</title>
<form id="order" method="post" action="${action}" enctype="${ENCTYPE[enc]}">${hidden}
<input name="item" value="red book"><input name="qty" value="2"><button id="buy">Buy</button></form>`;
  app.get('/shop', (c) => c.html(form('/orders', c.req.query('enc') as Enc, '')));
  // A fresh key each time the page is served (a reload of the form page is a new intent).
  app.get('/page-shop', (c) => c.html(form('/page-orders', c.req.query('enc') as Enc, `<input type="hidden" name="idempotency_key" value="${randomUUID()}">`)));
  const order = async (c: { req: { parseBody(): Promise<Record<string, unknown>> } }) => {
    const body = await c.req.parseBody();
    orders.push(String(body.item));
    return `<!doctype html><meta charset="utf-8"><title>order</title><p id="done">Order ${orders.length}: ${body.qty} × ${body.item}, ${randomUUID()}</p>`;
  };
  app.post('/orders', async (c) => c.html(await order(c), 201));
  app.post('/page-orders', async (c) => c.html(await order(c), 201));
  return { app, seen, orders };
}

/** A proxy that answers every request 403: where Firefox's traffic to anything but 127.0.0.1 ends. */
function sink(): Promise<{ server: Server; port: number; hits: string[] }> {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    res.writeHead(403).end();
  });
  server.on('connect', (req, socket) => {
    hits.push(`CONNECT ${req.url}`);
    socket.end('HTTP/1.1 403 Forbidden\r\n\r\n');
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, port: (server.address() as AddressInfo).port, hits })));
}

async function launch(sinkPort: number, keys: boolean): Promise<Browser> {
  const { default: puppeteer } = await import('puppeteer-core');
  return puppeteer.launch({
    browser: 'firefox',
    executablePath: FIREFOX,
    headless: true,
    extraPrefsFirefox: {
      'network.http.idempotencyKey.enabled': keys,
      // Reloading a POST result asks "resend?": the test accepts it, as the user would.
      'dom.confirm_repost.testing.always_accept': true,
      // Everything but 127.0.0.1 goes to the sink; no background traffic on top.
      'network.proxy.type': 1,
      'network.proxy.http': '127.0.0.1',
      'network.proxy.http_port': sinkPort,
      'network.proxy.ssl': '127.0.0.1',
      'network.proxy.ssl_port': sinkPort,
      'network.proxy.no_proxies_on': '127.0.0.1',
      'network.captive-portal-service.enabled': false,
      'network.connectivity-service.enabled': false,
      'network.dns.disablePrefetch': true,
      'network.prefetch-next': false,
      'app.update.enabled': false,
      'browser.safebrowsing.malware.enabled': false,
      'browser.safebrowsing.phishing.enabled': false,
      'datareporting.healthreport.uploadEnabled': false,
      'toolkit.telemetry.enabled': false,
      'extensions.update.enabled': false,
      'browser.search.update': false,
    },
  });
}

/** A page of a Firefox launched for the enclosing suite (and closed after it). */
function firefoxPage(sinkPort: () => number, keys: boolean): () => Page {
  let browser: Browser | undefined;
  let page: Page | undefined;
  before(async () => {
    browser = await launch(sinkPort(), keys);
    page = await browser.newPage();
  });
  after(async () => browser?.close());
  return () => page!;
}

/** What the page's own script sees (`page.evaluate` runs it in Firefox). */
declare const location: { pathname: string };
declare const document: { readyState: string; getElementById(id: string): unknown };

/** The order page's text, once it is the page shown. */
async function orderText(page: Page): Promise<string> {
  await page.waitForSelector('#done');
  return page.$eval('#done', (e) => e.textContent ?? '');
}

/**
 * Submits the order form and waits for the answer page: its `#done`, which the form page has
 * not (after the back button puppeteer's navigation tracking over BiDi misses the submit).
 */
async function buy(page: Page): Promise<string> {
  await page.click('#buy');
  return orderText(page);
}

/**
 * The back button. Firefox restores the form page from its cache without a navigation event
 * puppeteer waits for over BiDi, so this waits on the page itself: the form is shown again.
 */
async function back(page: Page, path: string): Promise<void> {
  void page.goBack().catch(() => undefined);
  for (;;) {
    const shown = await page.evaluate(() => `${location.pathname} ${document.readyState} ${document.getElementById('buy') !== null}`).catch(() => '');
    if (shown === `${path} complete true`) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('browser-generated keys: real Firefox ESR posts a form to idem', { skip }, () => {
  let server: ReturnType<typeof serve>;
  let base = '';
  let state: ReturnType<typeof shop>;
  let proxy: Awaited<ReturnType<typeof sink>>;
  before(async () => {
    state = shop();
    proxy = await sink();
    server = serve({ fetch: state.app.fetch, port: 0, hostname: '127.0.0.1' });
    await new Promise<void>((resolve) => server.once('listening', () => resolve()));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    server?.close();
    proxy?.server.close();
  });

  const posts = (path: string, from: number) => state.seen.slice(from).filter((s) => s.path === path);

  describe('with network.http.idempotencyKey.enabled', () => {
    const page = firefoxPage(() => proxy.port, true);

    for (const enc of ['urlencoded', 'multipart'] as const) {
      test(`${enc}: a reload re-posts with Firefox's key and replays; back and submit again is a new key`, T, async () => {
        const from = state.seen.length;
        const ordersBefore = state.orders.length;
        await page().goto(`${base}/shop?enc=${enc}`);
        const first = await buy(page());
        await page().reload();
        const reloaded = await orderText(page());
        assert.equal(reloaded, first, 'the reload shows the first response, replayed');
        assert.equal(state.orders.length, ordersBefore + 1, 'one order for the post and its reload');

        await back(page(), '/shop');
        const second = await buy(page());
        const [post, repost, resubmit] = posts('/orders', from);
        assert.ok(post && repost && resubmit, JSON.stringify(state.seen.slice(from)));
        assert.match(post.key ?? '', /^"\d+"$/, 'Firefox sent an Idempotency-Key (an sf-string of digits)');
        assert.ok(post.contentType.startsWith(ENCTYPE[enc]));
        assert.deepEqual([post.status, post.replayed], [201, false]);
        assert.equal(repost.key, post.key, 'the reload keeps the key');
        assert.equal(repost.contentType, post.contentType, 'and the bytes: the same multipart boundary');
        assert.deepEqual([repost.status, repost.replayed], [201, true]);
        // The truth: a fresh submission of the form is a new key, so a new order.
        assert.notEqual(resubmit.key, post.key, 'a second submit after the back button gets a new key');
        assert.deepEqual([resubmit.status, resubmit.replayed], [201, false]);
        assert.notEqual(second, first);
        assert.equal(state.orders.length, ordersBefore + 2);
      });

      test(`${enc}: a key the page sets in a hidden field makes the reload and the second submit one order`, T, async () => {
        const from = state.seen.length;
        const ordersBefore = state.orders.length;
        await page().goto(`${base}/page-shop?enc=${enc}`);
        const first = await buy(page());
        await page().reload();
        assert.equal(await orderText(page()), first);
        await back(page(), '/page-shop');
        assert.equal(await buy(page()), first, 'the second submit gets the first response');
        assert.equal(state.orders.length, ordersBefore + 1, 'one order');
        const [post, repost, resubmit] = posts('/page-orders', from);
        assert.ok(post && repost && resubmit, JSON.stringify(state.seen.slice(from)));
        assert.match(post.key ?? '', /^"\d+"$/, 'Firefox still adds its own key: not read on this route');
        assert.notEqual(resubmit.key, post.key);
        assert.deepEqual(
          [post, repost, resubmit].map((s) => [s.status, s.replayed]),
          [
            [201, false],
            [201, true],
            [201, true],
          ],
        );
        if (enc === 'multipart') assert.notEqual(resubmit.contentType, post.contentType, 'a fresh submission has a new boundary, and still replays');
      });
    }
  });

  describe('with the pref off', () => {
    const page = firefoxPage(() => proxy.port, false);

    test('Firefox sends no key: the header route passes through (a reload orders twice), the hidden field still replays', T, async () => {
      const from = state.seen.length;
      const ordersBefore = state.orders.length;
      await page().goto(`${base}/shop?enc=urlencoded`);
      const first = await buy(page());
      await page().reload();
      assert.notEqual(await orderText(page()), first, 'no key: the reload ran the order again');
      assert.equal(state.orders.length, ordersBefore + 2);
      for (const s of posts('/orders', from)) assert.deepEqual([s.key, s.replayed], [null, false]);

      await page().goto(`${base}/page-shop?enc=multipart`);
      const paged = await buy(page());
      await page().reload();
      assert.equal(await orderText(page()), paged);
      assert.equal(state.orders.length, ordersBefore + 3);
      assert.deepEqual(
        posts('/page-orders', from).map((s) => [s.key, s.replayed]),
        [
          [null, false],
          [null, true],
        ],
      );
    });
  });

  test('nothing Firefox sent went anywhere but 127.0.0.1 and the sink', () => {
    // The sink answered whatever background request Firefox made with 403; nothing left the machine.
    for (const hit of proxy.hits) assert.doesNotMatch(hit, /127\.0\.0\.1:\d+\/(shop|orders|page-)/);
  });
});
