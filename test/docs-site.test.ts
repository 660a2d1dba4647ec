/**
 * The docs site (issue 25 item 3) in headless chromium: the built VitePress site (`npm run
 * docs:build`, built here when missing) served as it would be hosted, one guide opened at
 * 1280 × 800, and its screenshot checked: not blank, the page's title, the sidebar listing the
 * guides, the search box, and a search that finds a guide. Full matrix only (a build and a
 * browser); it runs in `npm run test:all` on the build `.ci/run` made and checked just before
 * (`npm run test:docs` alone). `IDEM_UPDATE_SCREENSHOT=1` rewrites docs/site.png.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import { chromiumSkip, launchChromium } from './helpers/chromium.js';
import { fullMatrixOnly } from './helpers/services.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const DOCS = join(ROOT, 'docs');
const DIST = join(DOCS, '.vitepress', 'dist');

/** What a screenshot shows, counted by chromium itself from the PNG's pixels. */
interface PixelCensus {
  width: number;
  height: number;
  /** Share of pixels that differ from the top-left one (the page's background). */
  inked: number;
  /** Distinct colours among the pixels, sampled. */
  colours: number;
}

/** Runs in the page (a string: this project's type check has no DOM library). */
const CENSUS = `async (b64) => {
  const img = new Image();
  img.src = 'data:image/png;base64,' + b64;
  await img.decode();
  const canvas = document.createElement('canvas');
  canvas.width = img.width;
  canvas.height = img.height;
  const context = canvas.getContext('2d');
  context.drawImage(img, 0, 0);
  const { data } = context.getImageData(0, 0, img.width, img.height);
  const colours = new Set();
  let inked = 0;
  for (let i = 0; i < data.length; i += 4) {
    if (data[i] !== data[0] || data[i + 1] !== data[1] || data[i + 2] !== data[2]) inked++;
    if (i % 64 === 0) colours.add((data[i] << 16) | (data[i + 1] << 8) | data[i + 2]);
  }
  return { width: img.width, height: img.height, inked: inked / (data.length / 4), colours: colours.size };
}`;

async function census(page: Page, png: Buffer): Promise<PixelCensus> {
  return (await page.evaluate(`(${CENSUS})(${JSON.stringify(png.toString('base64'))})`)) as PixelCensus;
}

describe('the docs site in chromium', { skip: fullMatrixOnly() || chromiumSkip }, () => {
  let browser: Browser;
  let server: Awaited<ReturnType<typeof import('vitepress')['serve']>>;
  let origin: string;

  before(async () => {
    if (!existsSync(join(DIST, 'guides', 'hono.html'))) {
      const built = spawnSync('npx', ['vitepress', 'build', 'docs'], { cwd: ROOT, stdio: 'inherit' });
      assert.equal(built.status, 0, 'vitepress build docs failed');
    }
    const { serve } = await import('vitepress'); // loaded only where the suite runs
    server = await serve({ root: DOCS, port: 0 });
    const http = server.server!;
    if (!http.listening) await new Promise((resolve) => http.once('listening', resolve));
    origin = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    server?.server?.close();
  });

  test('a guide renders with its title, the sidebar of guides and the search box, and its screenshot is not blank', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    const response = await page.goto(`${origin}/guides/hono.html`, { waitUntil: 'load' });
    assert.equal(response?.status(), 200);
    assert.equal(await page.title(), 'Hono | idem');
    await page.locator('h1', { hasText: 'Hono' }).waitFor();

    const sidebar = page.locator('.VPSidebar');
    await sidebar.waitFor({ state: 'visible' });
    for (const group of ['Frameworks', 'Stores', 'Database clients', 'Operations']) {
      assert.ok(await sidebar.locator('h2', { hasText: new RegExp(`^${group}$`) }).isVisible(), `sidebar group ${group}`);
    }
    for (const guide of ['Express', 'Fastify', 'Redis', 'RabbitMQ']) {
      assert.ok((await sidebar.getByRole('link', { name: guide }).count()) > 0, `sidebar link to ${guide}`);
    }
    // Every guide file is in the sidebar, with no list to keep (docs/.vitepress/config.mts).
    const linked = new Set(await sidebar.locator('a').evaluateAll((links) => links.map((a) => a.getAttribute('href'))));
    for (const file of readdirSync(join(DOCS, 'guides')).filter((f) => f.endsWith('.md'))) {
      assert.ok(linked.has(`/guides/${file.replace(/\.md$/, '.html')}`), `sidebar link to docs/guides/${file}`);
    }
    const search = page.locator('#local-search button');
    await search.waitFor({ state: 'visible' });

    const png = await page.screenshot({ fullPage: false });
    const file = join(tmpdir(), `idem-docs-site-${process.pid}.png`);
    writeFileSync(file, png);
    if (process.env.IDEM_UPDATE_SCREENSHOT) writeFileSync(join(DOCS, 'site.png'), png); // the picture in docs/site.md
    const blank = await browser.newPage();
    const seen = await census(blank, png);
    await blank.close();
    assert.deepEqual([seen.width, seen.height], [1280, 800], `screenshot ${file}`);
    assert.ok(seen.inked > 0.02, `screenshot ${file} is almost blank: ${(seen.inked * 100).toFixed(1)} % inked`);
    assert.ok(seen.colours > 8, `screenshot ${file} has ${seen.colours} colours`);

    // The built-in local search finds a guide from words in its text.
    await search.click();
    const input = page.locator('.VPLocalSearchBox input');
    await input.fill('PostgresPhases');
    const hit = page.locator('.VPLocalSearchBox .result', { hasText: 'Redis' }).first();
    await hit.waitFor({ state: 'visible' });
    await page.close();
  });
});
