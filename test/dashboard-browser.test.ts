/**
 * `idem dashboard` in headless chromium (issue 31 and issue 25 item 5), over the real server and a
 * PGlite key table: the page works under its strict CSP with no violation, moves `?token=` out of
 * its URL into a header and releases a stuck key through the guarded action; and it says *why*:
 * failed attempts, the stored problem type, every key row opens the inspector, the
 * `idem complete` / `idem inspect` commands for a stuck key, nothing clipped at 1280 px.
 * `IDEM_UPDATE_SCREENSHOT=1` rewrites docs/dashboard.png.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import type { PGlite } from '@electric-sql/pglite';
import { pglite } from './helpers/pglite.js';
import type { Page } from 'playwright-core';
import { startDashboard } from '../src/cli/dashboard.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { HttpIdempotency } from '../src/http/index.js';
import { PostgresStore } from '../src/postgres/index.js';
import { chromiumSkip as skip, launchChromium } from './helpers/chromium.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TOKEN = 'browser-s3cret';
const LONG_KEY = `order-${'7f3a9c'.repeat(20)}`;
const fp = (text: string) => createHash('sha256').update(text).digest();

describe('idem dashboard in chromium', () => {
  let db: PGlite;
  let store: PostgresStore;
  const table = `dash_browser_${process.pid}`;
  const lease = async (key: string) =>
    (await db.query(`SELECT locked_until, lock_version::text AS token FROM ${table} WHERE key = $1`, [key])).rows[0] as { locked_until: Date; token: string };

  before(async () => {
    db = pglite();
    store = new PostgresStore({ client: db, table });
    await store.migrate();
    const engine = new IdempotencyEngine({ store, leaseMs: 60_000 });
    const begin = async (key: string) => {
      const begun = await engine.begin({ scope: 'tenant:acme', key, fingerprint: fp(key) });
      assert.equal(begun.kind, 'execute');
      return begun.kind === 'execute' ? begun.execution : assert.fail('claimed');
    };
    for (let i = 0; i < 5; i++) {
      const execution = await begin(i === 4 ? LONG_KEY : `order-${i}`);
      await execution.phase('charge_created', async () => ({ id: `ch_${i}` }));
      await execution.finish({ status: 201, headers: [['content-type', 'application/json']], body: new TextEncoder().encode('{"id":"ch"}') });
    }
    // Failed twice, then released; its request is stored, so a completer can finish it.
    const failed = await begin('stuck-after-errors');
    await failed.phase('charge_created', async () => ({ id: 'ch_s' }));
    await failed.countFailure();
    await failed.countFailure();
    await failed.release();
    await db.query(`UPDATE ${table} SET request = '{}'::jsonb WHERE key = 'stuck-after-errors'`);
    // A worker that crashed an hour ago: no failure counted, no request stored.
    await begin('stuck-crashed');
    await db.query(`UPDATE ${table} SET locked_until = now() - interval '1 hour' WHERE key = 'stuck-crashed'`);
    await begin('in-flight');
    // A request that fails every time: finished with the stored problem request-failed-permanently.
    const http = new HttpIdempotency({ store, scope: () => 'tenant:acme', maxAttempts: 2, onHandlerError: () => undefined });
    for (let i = 0; i < 2; i++) {
      const request = new Request('http://app.test/v1/charges', {
        method: 'POST',
        headers: { 'idempotency-key': 'always-fails', 'content-type': 'application/json' },
        body: '{}',
      });
      await http.handle(request, () => {
        throw new Error('a bug in the handler');
      });
    }
    await db.query(`UPDATE ${table} SET created_at = now() - interval '30 hours' WHERE key = 'order-0'`);
  });
  after(async () => {
    await db.close();
  });

  /** Console messages and page errors of a page, to assert none is a CSP violation. */
  function watch(page: Page): string[] {
    const messages: string[] = [];
    page.on('console', (m) => messages.push(`${m.type()}: ${m.text()}`));
    page.on('pageerror', (e) => messages.push(`pageerror: ${e.message}`));
    return messages;
  }

  test('under its CSP the page works with no violation; ?token= moves into a header and out of the URL; release of a stuck key goes through', {
    skip,
  }, async () => {
    const dash = await startDashboard({ store, port: 0, token: TOKEN });
    const browser = await launchChromium();
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      const messages = watch(page);
      const apiCalls: Array<{ url: string; authorization?: string }> = [];
      page.on('request', (r) => {
        if (r.url().includes('/api/')) apiCalls.push({ url: r.url(), authorization: r.headers().authorization });
      });
      const response = await page.goto(dash.url);
      assert.match(
        response!.headers()['content-security-policy'] ?? '',
        /default-src 'none'; script-src 'sha256-[^']+'; style-src 'sha256-[^']+'; connect-src 'self'/,
      );
      await page.waitForSelector('body[data-ready="true"]', { timeout: 30_000 });
      assert.equal(new URL(page.url()).search, '', 'the token left the URL');
      assert.ok(!String(await page.evaluate('location.href')).includes(TOKEN));
      assert.ok(apiCalls.length > 0);
      for (const call of apiCalls) {
        assert.ok(!call.url.includes(TOKEN), `no token in ${call.url}`);
        assert.equal(call.authorization, `Bearer ${TOKEN}`);
      }
      assert.equal(await page.textContent('#auth'), 'actions on (token)');
      // The style applied under the CSP: the stuck section spans the grid.
      assert.ok((await page.locator('#stuck').boundingBox())!.width > 1000, 'the stylesheet applies');

      await page.reload();
      await page.waitForSelector('body[data-ready="true"]', { timeout: 30_000 });
      assert.match((await page.textContent('#stuck'))!, /stuck-crashed/, 'a reload keeps the token (sessionStorage)');

      const before = await lease('stuck-crashed');
      await page.click('#stuck tr:has-text("stuck-crashed")');
      await page.waitForSelector('#release');
      await page.click('#release');
      await page.waitForSelector('#released');
      assert.match((await page.textContent('#released')) ?? '', /^released: the lease ended now; token \d+ -> \d+/);
      const after = await lease('stuck-crashed');
      assert.ok(Number(after.token) > Number(before.token), `the release drew a new token (K21): ${before.token} -> ${after.token}`);
      assert.ok(after.locked_until > before.locked_until, 'the lease end moved to now');
      const violations = messages.filter((m) => /Content Security Policy|Refused to/i.test(m) || m.startsWith('pageerror'));
      assert.deepEqual(violations, [], messages.join('\n'));
    } finally {
      await browser.close();
      await dash.close();
    }
  });

  test('it says why: failed attempts, the problem type, every key row opens the inspector, the commands for a stuck key, nothing clipped at 1280 px', {
    skip,
  }, async () => {
    const dash = await startDashboard({ store, port: 0 });
    const browser = await launchChromium();
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      const messages = watch(page);
      await page.goto(dash.url);
      await page.waitForSelector('body[data-ready="true"]', { timeout: 30_000 });
      const cells = async (section: string, key: string) =>
        page.$$eval(`#${section} tr`, (rows, k) => rows.map((r) => [...r.children].map((c) => c.textContent)).find((c) => c.includes(k)) ?? [], key);
      const header = async (section: string) => (await page.$$eval(`#${section} tr:first-child th`, (ths) => ths.map((t) => t.textContent))) as string[];
      const stuckHead = await header('stuck');
      const stuckRow = await cells('stuck', 'stuck-after-errors');
      assert.equal(stuckRow[stuckHead.indexOf('failed attempts')], '2');
      assert.equal(stuckRow[stuckHead.indexOf('next step')], 'idem complete --app <module>');
      assert.equal((await cells('stuck', 'stuck-crashed'))[stuckHead.indexOf('next step')], 'a retry with the same key');
      const failHead = await header('failing');
      const failRow = await cells('failing', 'always-fails');
      assert.equal(failRow[failHead.indexOf('problem type')], 'request-failed-permanently');
      assert.equal(failRow[failHead.indexOf('failed attempts')], '2');
      assert.equal(failRow[failHead.indexOf('status')], '500');
      assert.match((await page.textContent('#actions'))!, /disabled: start idem dashboard with --token/);

      for (const [section, key] of [
        ['stuck', 'stuck-after-errors'],
        ['failing', 'always-fails'],
        ['oldest', 'order-1'],
        ['past', 'order-0'],
      ] as const) {
        await page.click(`#${section} tr:has-text("${key}")`);
        await page.locator('#inspection', { hasText: `idem inspect tenant:acme ${key}` }).waitFor({ timeout: 30_000 });
      }
      await page.click('#failing tr:has-text("always-fails")');
      await page.locator('#why', { hasText: 'always-fails' }).waitFor({ timeout: 30_000 });
      assert.match((await page.textContent('#why'))!, /Finished with a problem: request-failed-permanently/);
      assert.match((await page.textContent('#inspected'))!, /failed attempts\s*2/);

      await page.click('#stuck tr:has-text("stuck-after-errors")');
      await page.locator('#why', { hasText: 'stuck-after-errors' }).waitFor({ timeout: 30_000 });
      const why = (await page.textContent('#why'))!;
      assert.match(why, /Stuck: nobody is working on this key/);
      assert.match(why, /2 failed attempt\(s\) so far/);
      assert.match(why, /resumes after "charge_created"/);
      assert.match(why, /idem complete --app <your completer module>/);
      assert.match(why, /idem inspect tenant:acme stuck-after-errors/);
      assert.equal(await page.locator('#release').count(), 0, 'no action without a token');

      // Nothing clipped at 1280 px: every table fits its section, with no hidden scroll.
      const overflow = await page.$$eval('section', (sections) =>
        sections.flatMap((s) => {
          const box = s.getBoundingClientRect();
          return [...s.querySelectorAll('table, .scroll')]
            .filter((t) => t.getBoundingClientRect().right > box.right - 1 || t.scrollWidth > t.clientWidth + 1)
            .map((t) => `${s.querySelector('h2')?.textContent}: ${t.tagName} ${Math.round(t.getBoundingClientRect().right)} > ${Math.round(box.right)}`);
        }),
      );
      assert.deepEqual(overflow, []);
      assert.ok(Number(await page.evaluate('document.documentElement.scrollWidth')) <= 1280, 'no horizontal scroll of the page');
      const violations = messages.filter((m) => /Content Security Policy|Refused to/i.test(m) || m.startsWith('pageerror'));
      assert.deepEqual(violations, [], messages.join('\n'));

      await page.evaluate('window.scrollTo(0, 0)');
      const update = process.env.IDEM_UPDATE_SCREENSHOT === '1';
      const shot = update ? join(ROOT, 'docs', 'dashboard.png') : join(tmpdir(), `idem-dashboard-${process.pid}.png`);
      await page.screenshot({ path: shot, fullPage: true });
      if (!update) rmSync(shot);
    } finally {
      await browser.close();
      await dash.close();
    }
  });
});
