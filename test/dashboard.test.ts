/**
 * `idem dashboard`: the page rendered in headless chromium (Debian's chromium through
 * playwright-core) over a populated PGlite table, its read-only JSON API, the token rule (docs/dashboard.md), and
 * the CLI command run for real. The "why" and the CSP in the browser, and docs/dashboard.png:
 * test/dashboard-browser.test.ts.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import type { PGlite } from '@electric-sql/pglite';
import { pglite } from './helpers/pglite.js';
import { startDashboard } from '../src/cli/dashboard.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { type DashboardData, PostgresStore } from '../src/postgres/index.js';
import { chromiumSkip, launchChromium } from './helpers/chromium.js';
import { MySqlStore } from '../src/mysql/index.js';
import { openMySqlDatabase } from './helpers/mysql-stores.js';
import { needs } from './helpers/services.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const skip = chromiumSkip;
const fp = (text: string) => createHash('sha256').update(text).digest();
const SECRET_BODY = 'card_number_4242424242424242';

describe('idem dashboard', () => {
  let db: PGlite;
  let store: PostgresStore;

  before(async () => {
    db = pglite();
    store = new PostgresStore({ client: db, table: 'dash_keys' });
    await store.migrate();
    const engine = new IdempotencyEngine({ store, leaseMs: 60_000 });
    const body = new TextEncoder().encode(JSON.stringify({ id: 'ch_1', secret: SECRET_BODY }));
    for (let i = 0; i < 12; i++) {
      const begun = await engine.begin({ scope: 'tenant:acme', key: `order-${i}`, fingerprint: fp(`o${i}`) });
      if (begun.kind !== 'execute') continue;
      await begun.execution.phase('charge_created', async () => ({ id: `ch_${i}` }));
      if (i < 9) await begun.execution.finish({ status: 201, headers: [['content-type', 'application/json']], body });
      else if (i === 9) await begun.execution.release(); // stuck: released, nobody retried
    }
    // Two keys created 3 and 30 hours ago: one for the timeline, one past retention.
    await db.query(`UPDATE dash_keys SET created_at = now() - interval '3 hours' WHERE key = 'order-1'`);
    await db.query(`UPDATE dash_keys SET created_at = now() - interval '30 hours' WHERE key = 'order-2'`);
  });
  after(async () => {
    await db.close();
  });

  test('the JSON API: overview and inspector, read-only, never a body', async () => {
    const dash = await startDashboard({ store, port: 0 });
    try {
      const base = dash.url.replace(/\/$/, '');
      const overview = (await (await fetch(`${base}/api/overview`)).json()) as DashboardData;
      assert.equal(overview.stats.total, 12);
      assert.equal(overview.stats.abandoned, 1);
      assert.equal(overview.stats.expiredUnswept, 1);
      assert.deepEqual(
        overview.stuck.map((k: { key: string }) => k.key),
        ['order-9'],
      );
      assert.deepEqual(
        overview.pastRetention.map((k: { key: string }) => k.key),
        ['order-2'],
      );
      assert.equal(overview.oldest[0]?.key, 'order-1');
      assert.ok(overview.timeline.length >= 2);
      const inspected = await (await fetch(`${base}/api/inspect?scope=tenant:acme&key=order-0`)).text();
      assert.ok(!inspected.includes(SECRET_BODY), 'no body in the inspector');
      assert.ok(!inspected.includes('ch_0'), 'no phase results in the inspector');
      assert.deepEqual(JSON.parse(inspected).phases, ['charge_created']);
      assert.equal((await fetch(`${base}/api/inspect?scope=tenant:acme&key=nope`)).status, 404);
      assert.equal((await fetch(`${base}/api/overview`, { method: 'POST' })).status, 405);
    } finally {
      await dash.close();
    }
  });

  test('loopback only unless a token is set; with a token, every API request needs it in its header', async () => {
    await assert.rejects(startDashboard({ store, host: '0.0.0.0', port: 0 }), /--token/);
    const dash = await startDashboard({ store, host: '127.0.0.1', port: 0, token: 's3cret' });
    try {
      const base = dash.url.split('?')[0]!.replace(/\/$/, '');
      assert.equal((await fetch(`${base}/api/overview`)).status, 401);
      assert.equal((await fetch(`${base}/api/overview`, { headers: { authorization: 'Bearer wrong!' } })).status, 401);
      assert.equal((await fetch(`${base}/api/overview`, { headers: { authorization: 'Bearer s3cret' } })).status, 200);
      assert.equal((await fetch(dash.url)).status, 200);
    } finally {
      await dash.close();
    }
  });

  test('renders in headless chromium: cards, chart, stuck and past-retention keys, the inspector', { skip }, async () => {
    const dash = await startDashboard({ store, port: 0 });
    const browser = await launchChromium();
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      await page.goto(dash.url);
      await page.waitForSelector('body[data-ready="true"]', { timeout: 30_000 });
      assert.equal(await page.textContent('[data-stat="total"] b'), '12');
      assert.equal(await page.textContent('[data-stat="stuck"] b'), '1');
      assert.equal(await page.textContent('[data-stat="past retention"] b'), '1');
      assert.ok((await page.locator('#chart rect').count()) >= 2, 'the timeline has bars');
      assert.match((await page.textContent('#stuck'))!, /order-9/);
      assert.match((await page.textContent('#past'))!, /order-2/);
      assert.match((await page.textContent('#table'))!, /dash_keys \(plain\)/);
      await page.click('#stuck tr:nth-child(2)');
      await page.waitForSelector('#inspected');
      const inspected = (await page.textContent('#inspected'))!;
      assert.match(inspected, /started/);
      assert.match(inspected, /charge_created/);
      assert.match(inspected, /lease\s*expired/, 'a release ends the lease at its now(): shown as expired, not none');
      await page.fill('#inspect input[name=key]', 'order-0');
      await page.click('#inspect button');
      // A locator wait, not waitForFunction: the page's CSP forbids eval, which a string predicate needs.
      await page.locator('#inspected', { hasText: '201' }).waitFor({ timeout: 30_000 });
      assert.ok(!(await page.content()).includes(SECRET_BODY), 'no body anywhere on the page');
    } finally {
      await browser.close();
      await dash.close();
    }
  });

  test('the CLI: `idem dashboard --port 0 --allowed-host …` prints its URL, serves those hosts only, and stops on SIGTERM', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'idem-dash-'));
    try {
      const run = (args: string[]) =>
        spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'src/cli/main.ts'), ...args, '--data-dir', dir], {
          cwd: ROOT,
          env: { ...process.env, DATABASE_URL: '' },
        });
      const migrate = run(['migrate']);
      assert.equal(await new Promise((resolve) => migrate.on('exit', resolve)), 0);
      const child = run(['dashboard', '--port', '0', '--allowed-host', 'idem.test', '--allowed-host', 'proxy.test:8443']);
      let out = '';
      const url = await new Promise<string>((resolve, reject) => {
        child.stdout.on('data', (chunk) => {
          out += chunk;
          const m = /idem dashboard on (http:\/\/127\.0\.0\.1:\d+\/)/.exec(out);
          if (m) resolve(m[1]!);
        });
        child.on('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
      });
      const overview = (await (await fetch(`${url}api/overview`)).json()) as DashboardData;
      assert.equal(overview.stats.total, 0);
      assert.equal(overview.table, 'idempotency_keys');
      const status = (host: string) =>
        new Promise<number>((resolve, reject) =>
          http.get(`${url}api/overview`, { headers: { host }, agent: false }, (res) => resolve(res.resume().statusCode!)).on('error', reject),
        );
      assert.deepEqual(
        [await status('idem.test'), await status('proxy.test:8443'), await status('attacker.example')],
        [200, 200, 421],
        'each --allowed-host is answered, another Host is not',
      );
      const exited = new Promise((resolve) => child.on('exit', resolve));
      child.kill('SIGTERM');
      assert.equal(await exited, 0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('idem dashboard on MySQL/MariaDB (the operator capability, no cast)', { skip: needs('MYSQL_URL') }, () => {
  test('the overview, the inspector, and release and forget actions fenced by the token shown', async () => {
    const db = await openMySqlDatabase();
    const store = new MySqlStore({ client: db.pool, table: 'dash_keys' });
    try {
      await store.migrate();
      const engine = new IdempotencyEngine({ store, leaseMs: 60_000 });
      const stuck = await engine.begin({ scope: 'tenant:acme', key: 'stuck', fingerprint: fp('s') });
      assert.equal(stuck.kind, 'execute');
      if (stuck.kind === 'execute') {
        await stuck.execution.phase('charged', async () => 'ch_1');
        await stuck.execution.countFailure();
      }
      await db.pool.query("UPDATE dash_keys SET locked_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE `key` = 'stuck'");
      const failed = await engine.begin({ scope: 'tenant:acme', key: 'failed', fingerprint: fp('f') });
      const problem = { type: 'urn:example:declined', secret: SECRET_BODY };
      if (failed.kind === 'execute')
        await failed.execution.finish(async () => ({
          status: 502,
          headers: [['content-type', 'application/problem+json']],
          body: new TextEncoder().encode(JSON.stringify(problem)),
        }));
      const dash = await startDashboard({ store, port: 0, token: 't0k' });
      const base = new URL(dash.url).origin;
      const auth = { authorization: 'Bearer t0k' };
      try {
        const overview = (await (await fetch(`${base}/api/overview`, { headers: auth })).json()) as DashboardData & { actions: boolean };
        assert.equal(overview.actions, true);
        assert.equal(overview.stats.total, 2);
        assert.deepEqual(
          overview.stuck.map((k) => [k.key, k.recoveryPoint, k.failedAttempts]),
          [['stuck', 'charged', 1]],
        );
        assert.deepEqual(
          overview.failing.map((k) => [k.key, k.responseStatus, k.problemType]),
          [
            ['failed', 502, 'urn:example:declined'],
            ['stuck', null, null],
          ],
        );
        assert.equal(
          overview.timeline.reduce((n, r) => n + r.count, 0),
          2,
        );
        assert.ok(!JSON.stringify(overview).includes(SECRET_BODY), 'no body in the overview');
        const inspected = (await (await fetch(`${base}/api/inspect?scope=tenant:acme&key=stuck`, { headers: auth })).json()) as Record<string, unknown>;
        assert.deepEqual(inspected.phases, ['charged']);
        assert.equal(inspected.failedAttempts, 1);
        const act = (action: string, key: string, token: string) =>
          fetch(`${base}/api/${action}`, {
            method: 'POST',
            headers: { ...auth, origin: base, 'content-type': 'application/json' },
            body: JSON.stringify({ scope: 'tenant:acme', key, token }),
          });
        const token = overview.stuck[0]!.token!;
        assert.equal((await act('release', 'stuck', String(Number(token) - 1))).status, 409, 'a token not shown is refused');
        const released = await act('release', 'stuck', token);
        assert.equal(released.status, 200, await released.clone().text());
        assert.match((await store.inspect('tenant:acme', 'stuck'))?.operatorNote ?? '', /"by":"dashboard"/);
        const done = await store.inspect('tenant:acme', 'failed');
        const forgot = await act('forget', 'failed', done!.token);
        assert.equal(forgot.status, 200, await forgot.clone().text());
        assert.equal((await store.get('tenant:acme', 'failed', 86_400_000))?.state, 'started');
      } finally {
        await dash.close();
      }
    } finally {
      await db.close();
    }
  });
});
