/**
 * `idem dashboard` is safe to leave running (issue 31), over the real server on a real socket
 * and a PGlite key table: it answers only its own `Host` (no DNS rebinding), sends a strict
 * Content-Security-Policy on every response, and its action (`POST /api/release`) needs the
 * token in a header and the dashboard's own `Origin`; a refused action leaves the key's row
 * unchanged. The browser side is in test/dashboard-browser.test.ts.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';
import type { PGlite } from '@electric-sql/pglite';
import { pglite } from './helpers/pglite.js';
import { type Dashboard, startDashboard } from '../src/cli/dashboard.js';
import { DASHBOARD_PAGE } from '../src/cli/dashboard-page.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { PostgresStore } from '../src/postgres/index.js';

const TOKEN = 'dash-s3cret-token';
const fp = (text: string) => createHash('sha256').update(text).digest();

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** One request with any `Host` (fetch may not set it), over a fresh connection. */
function request(base: string, path: string, init: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Answer> {
  const url = new URL(path, base);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: url.hostname, port: url.port, path: url.pathname + url.search, method: init.method ?? 'GET', headers: init.headers, agent: false },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
      },
    );
    req.on('error', reject);
    req.end(init.body);
  });
}

describe('idem dashboard guards', () => {
  let db: PGlite;
  let store: PostgresStore;
  const table = `dash_guard_${process.pid}`;
  /** The row as the release would change it. */
  const row = async (key: string) =>
    (
      await db.query(`SELECT state, recovery_point, lock_version::text AS token, locked_until, failed_attempts, operator_note FROM ${table} WHERE key = $1`, [
        key,
      ])
    ).rows[0] as {
      state: string;
      recovery_point: string;
      token: string;
      locked_until: Date | null;
      operator_note: string | null;
    };
  let stuckToken = '';

  before(async () => {
    db = pglite();
    store = new PostgresStore({ client: db, table });
    await store.migrate();
    const engine = new IdempotencyEngine({ store, leaseMs: 60_000 });
    for (const key of ['stuck', 'live', 'done']) {
      const begun = await engine.begin({ scope: 'tenant:acme', key, fingerprint: fp(key) });
      assert.equal(begun.kind, 'execute');
      if (begun.kind !== 'execute') continue;
      await begun.execution.phase('charge_created', async () => ({ id: 'ch_1' }));
      if (key === 'done') await begun.execution.finish({ status: 201, headers: [], body: new Uint8Array() });
    }
    // The worker on `stuck` died an hour ago: its lease ended then.
    await db.query(`UPDATE ${table} SET locked_until = now() - interval '1 hour' WHERE key = 'stuck'`);
    stuckToken = (await row('stuck')).token;
  });
  after(async () => {
    await db.close();
  });

  async function withDashboard(options: { token?: string; allowedHosts?: string[] }, run: (dash: Dashboard, base: string, origin: string) => Promise<void>) {
    const dash = await startDashboard({ store, port: 0, ...options });
    const base = dash.url.split('?')[0]!;
    try {
      await run(dash, base, new URL(base).origin);
    } finally {
      await dash.close();
    }
  }
  const release = (token = stuckToken) => JSON.stringify({ scope: 'tenant:acme', key: 'stuck', token });

  test('a request with Host: attacker.example gets 421 with a one-line reason on /, /api/overview and an action, and no data', async () => {
    await withDashboard({ token: TOKEN }, async (_dash, base, origin) => {
      const before = await row('stuck');
      const auth = { authorization: `Bearer ${TOKEN}` };
      for (const [path, init] of [
        ['/', {}],
        ['/api/overview', { headers: auth }],
        ['/api/inspect?scope=tenant:acme&key=stuck', { headers: auth }],
        ['/api/release', { method: 'POST', headers: { ...auth, origin, 'content-type': 'application/json' }, body: release() }],
      ] as const) {
        const answer = await request(base, path, { ...init, headers: { ...init.headers, host: `attacker.example:${new URL(base).port}` } });
        assert.equal(answer.status, 421, path);
        assert.match(answer.body, /^Host "attacker\.example:\d+" is not this dashboard's .*--allowed-host\n$/, path);
        assert.ok(!answer.body.includes('tenant:acme') && !answer.body.includes('<html'), `${path}: no data`);
      }
      assert.equal((await request(base, '/', { headers: { host: 'attacker.example' } })).status, 421, 'without a port too');
      assert.deepEqual(await row('stuck'), before, 'the key is unchanged');
    });
  });

  test('on loopback it answers localhost, 127.0.0.1 and [::1] with its port, and each --allowed-host name', async () => {
    await withDashboard({ allowedHosts: ['idem.internal.example', 'proxy.example:8443', 'fd00::5', '[fd00::6]:8080'] }, async (_dash, base) => {
      const port = new URL(base).port;
      const status = async (host: string) => (await request(base, '/api/overview', { headers: { host } })).status;
      for (const host of [
        `localhost:${port}`,
        `127.0.0.1:${port}`,
        `[::1]:${port}`,
        'idem.internal.example',
        'idem.internal.example:443',
        'proxy.example:8443',
        '[fd00::5]:7117',
        '[fd00::6]:8080',
      ]) {
        assert.equal(await status(host), 200, host);
      }
      for (const host of [
        `localhost:${Number(port) + 1}`,
        'proxy.example:9999',
        'proxy.example',
        `127.0.0.2:${port}`,
        'idem.internal.example.attacker.example',
        '[fd00::6]:8081',
      ]) {
        assert.equal(await status(host), 421, host);
      }
    });
    await assert.rejects(startDashboard({ store, port: 0, host: '0.0.0.0', token: TOKEN }), /--allowed-host/);
  });

  test("every response carries a strict CSP (the page's own script and style by hash), frame-ancestors 'none', nosniff and no-referrer", async () => {
    await withDashboard({ token: TOKEN }, async (_dash, base, origin) => {
      const hash = (text: string) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;
      const page = await request(base, '/');
      assert.equal(page.status, 200, 'the page holds no data: served without the token');
      assert.ok(page.headers['content-security-policy'], 'a Content-Security-Policy header');
      const script = /<script>([\s\S]*)<\/script>/.exec(page.body)![1]!;
      const style = /<style>([\s\S]*)<\/style>/.exec(page.body)![1]!;
      assert.equal(page.body, DASHBOARD_PAGE);
      const expected = `default-src 'none'; script-src ${hash(script)}; style-src ${hash(style)}; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`;
      assert.ok(!/ style=|<[^>]+ on[a-z]+=/.test(page.body), 'no inline style attribute or event handler in the markup');
      const answers = [
        page,
        await request(base, '/api/overview', { headers: { authorization: `Bearer ${TOKEN}` } }),
        await request(base, '/api/overview'),
        await request(base, '/nope'),
        await request(base, '/', { headers: { host: 'attacker.example' } }),
        await request(base, '/api/release', { method: 'POST', headers: { origin } }),
      ];
      assert.deepEqual(
        answers.map((a) => a.status),
        [200, 200, 401, 404, 421, 401],
      );
      for (const answer of answers) {
        assert.equal(answer.headers['content-security-policy'], expected);
        assert.equal(answer.headers['x-content-type-options'], 'nosniff');
        assert.equal(answer.headers['referrer-policy'], 'no-referrer');
        assert.equal(answer.headers['x-frame-options'], 'DENY');
      }
    });
  });

  test('without a configured token actions are disabled (403 saying how to enable them), reads on loopback stay tokenless, and the key is unchanged', async () => {
    await withDashboard({}, async (_dash, base, origin) => {
      const before = await row('stuck');
      const overview = await request(base, '/api/overview');
      assert.equal(overview.status, 200);
      assert.equal(JSON.parse(overview.body).actions, false);
      const refused = await request(base, '/api/release', {
        method: 'POST',
        headers: { origin, 'content-type': 'application/json', authorization: 'Bearer anything' },
        body: release(),
      });
      assert.equal(refused.status, 403);
      assert.match(JSON.parse(refused.body).error, /actions are disabled: start idem dashboard with --token/);
      assert.deepEqual(await row('stuck'), before);
    });
  });

  test('an action without the token, with a wrong one, with the token only in the URL, with a foreign or no Origin, or as a GET is refused, and the key is unchanged in the database', async () => {
    await withDashboard({ token: TOKEN }, async (_dash, base, origin) => {
      const before = await row('stuck');
      const json = { 'content-type': 'application/json' };
      const post = (headers: Record<string, string>, path = '/api/release') =>
        request(base, path, { method: 'POST', headers: { ...json, ...headers }, body: release() });
      const cases: Array<[string, Promise<Answer>, number]> = [
        ['no token', post({ origin }), 401],
        ['a wrong token', post({ origin, authorization: 'Bearer dash-s3cret-tokem' }), 401],
        ['the token in the URL', post({ origin }, `/api/release?token=${TOKEN}`), 401],
        ['a foreign Origin', post({ origin: 'http://attacker.example', authorization: `Bearer ${TOKEN}` }), 403],
        ['a foreign Origin with our port', post({ origin: `http://attacker.example:${new URL(base).port}`, authorization: `Bearer ${TOKEN}` }), 403],
        ['Origin null', post({ origin: 'null', authorization: `Bearer ${TOKEN}` }), 403],
        ['no Origin', post({ authorization: `Bearer ${TOKEN}` }), 403],
        [
          'a form post',
          request(base, '/api/release', {
            method: 'POST',
            headers: { origin, authorization: `Bearer ${TOKEN}`, 'content-type': 'application/x-www-form-urlencoded' },
            body: 'scope=tenant:acme',
          }),
          415,
        ],
        [
          'a GET',
          request(base, `/api/release?scope=tenant:acme&key=stuck&token=${stuckToken}`, { headers: { origin, authorization: `Bearer ${TOKEN}` } }),
          405,
        ],
      ];
      for (const [name, answer, status] of cases) assert.equal((await answer).status, status, name);
      assert.equal((await request(base, `/api/overview?token=${TOKEN}`)).status, 401, '?token= does not open the API');
      assert.deepEqual(await row('stuck'), before, 'the key is unchanged');
    });
  });

  test('with the token and its own Origin, release ends a stuck key’s lease now under a new token, recorded on the row; a live lease, a stale token and a finished key are refused', async () => {
    await withDashboard({ token: TOKEN }, async (_dash, base, origin) => {
      const headers = { origin, authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
      const post = (body: object) => request(base, '/api/release', { method: 'POST', headers, body: JSON.stringify(body) });
      const live = await row('live');
      const done = await row('done');
      const stale = await post({ scope: 'tenant:acme', key: 'stuck', token: String(Number(stuckToken) - 1) });
      assert.equal(stale.status, 409);
      assert.match(JSON.parse(stale.body).error, /another worker took the key over/);
      const held = await post({ scope: 'tenant:acme', key: 'live', token: live.token });
      assert.equal(held.status, 409);
      assert.match(JSON.parse(held.body).error, /holds the lease/);
      assert.equal((await post({ scope: 'tenant:acme', key: 'done', token: done.token })).status, 409);
      assert.equal((await post({ scope: 'tenant:acme', key: 'absent', token: '1' })).status, 404);
      assert.deepEqual(await row('live'), live);
      assert.deepEqual(await row('done'), done);

      const before = await row('stuck');
      const answer = await request(base, '/api/release', { method: 'POST', headers, body: release() });
      assert.equal(answer.status, 200, answer.body);
      const body = JSON.parse(answer.body);
      const { newToken: _n, message, ...rest } = body;
      assert.deepEqual(rest, { done: true, action: 'release', scope: 'tenant:acme', key: 'stuck', token: stuckToken });
      assert.match(message, /^released: the lease ended now/);
      const after = await row('stuck');
      assert.equal(after.token, body.newToken);
      assert.ok(Number(after.token) > Number(before.token), 'a new token: whoever held the old one is fenced');
      assert.ok(after.locked_until! > before.locked_until!, 'the lease end moved to now');
      assert.deepEqual(
        { ...after, locked_until: null, token: null, operator_note: null },
        { ...before, locked_until: null, token: null, operator_note: null },
        'nothing else changed',
      );
      assert.deepEqual(
        { ...JSON.parse(after.operator_note!), at: undefined },
        { action: 'release', at: undefined, token: Number(stuckToken), by: 'dashboard' },
      );
    });
  });

  test('a 16-digit token (as Redis issues: a µs clock) is accepted and released; one past 2^53 is refused unrounded, the row unchanged', async () => {
    const engine = new IdempotencyEngine({ store, leaseMs: 60_000 });
    const begun = await engine.begin({ scope: 'tenant:acme', key: 'big-token', fingerprint: fp('big-token') });
    assert.equal(begun.kind, 'execute');
    // A token as a Redis store draws it (µs since the epoch: 16 digits), its lease long over.
    await db.query(`UPDATE ${table} SET lock_version = 1764700000000123, locked_until = now() - interval '1 hour' WHERE key = 'big-token'`);
    await db.query(`SELECT setval('${table}_lock_version_seq', 1764700000000200)`);
    await withDashboard({ token: TOKEN }, async (_dash, base, origin) => {
      const headers = { origin, authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };
      const post = (key: string, token: string) =>
        request(base, '/api/release', { method: 'POST', headers, body: JSON.stringify({ scope: 'tenant:acme', key, token }) });
      // Past 2^53 - 1 no store issued it (Number would round it): refused, the row unchanged.
      const before = await row('big-token');
      const past = await post('big-token', '9007199254740993');
      assert.equal(past.status, 409, past.body);
      assert.deepEqual(await row('big-token'), before);
      assert.equal((await post('big-token', '-1')).status, 400);
      assert.equal((await post('big-token', '1.5')).status, 400);
      const answer = await post('big-token', '1764700000000123');
      assert.equal(answer.status, 200, answer.body);
      const body = JSON.parse(answer.body) as { token: string; newToken: string };
      assert.equal(body.token, '1764700000000123');
      assert.equal((await row('big-token')).token, body.newToken);
      assert.ok(BigInt(body.newToken) > 1764700000000123n);
    });
  });

  test('forget: without the token it is refused and the finished key unchanged; with it a started key is refused and a finished key forgotten', async () => {
    await withDashboard({ token: TOKEN }, async (_dash, base, origin) => {
      const json = { origin, 'content-type': 'application/json' };
      const done = await row('done');
      const forget = (key: string, token: string, extra: Record<string, string> = {}) =>
        request(base, '/api/forget', { method: 'POST', headers: { ...json, ...extra }, body: JSON.stringify({ scope: 'tenant:acme', key, token }) });
      assert.equal((await forget('done', done.token)).status, 401, 'no token');
      assert.equal((await forget('done', done.token, { authorization: 'Bearer nope' })).status, 401, 'a wrong token');
      assert.deepEqual(await row('done'), done, 'unchanged');
      const auth = { authorization: `Bearer ${TOKEN}` };
      const live = await row('live');
      const started = await forget('live', live.token, auth);
      assert.equal(started.status, 409);
      assert.match(JSON.parse(started.body).error, /the key is started .*only a finished key is forgotten/);
      assert.deepEqual(await row('live'), live);
      const answer = await forget('done', done.token, auth);
      assert.equal(answer.status, 200, answer.body);
      assert.match(JSON.parse(answer.body).message, /^forgotten: the stored response \(status 201\) is dropped/);
      const after = await row('done');
      assert.equal(after.state, 'started');
      assert.equal(after.recovery_point, 'start');
      assert.equal(JSON.parse(after.operator_note!).action, 'forget');
    });
  });
});
