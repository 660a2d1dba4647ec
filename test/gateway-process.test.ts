/**
 * `idem gateway` as a process (`node --import tsx src/cli/main.ts gateway`): a bad configuration
 * exits 2 naming the field; SIGTERM drains the request in flight; and the crash drill, a gateway
 * SIGKILLed while the Python upstream holds its request, restarted on the same PostgreSQL store,
 * whose retry after the lease reaches the upstream with a higher fencing token: 0 double effects.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { post, type PythonUpstream, retryUntilTakenOver, startPythonUpstream } from './helpers/gateway.js';
import { exitOf, spawnTs, stopChild, type Child } from './helpers/process.js';
import { needs, serviceUrl } from './helpers/services.js';

const dir = mkdtempSync(join(tmpdir(), 'idem-gw-config-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Writes a config file and returns its path. */
function configFile(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

/** Starts `idem gateway` with `args`; resolves with the child and its URL once it listens. */
async function startGatewayProcess(args: string[]): Promise<{ child: Child; url: string }> {
  const child = spawnTs('src/cli/main.ts', {}, ['gateway', ...args]);
  const match = await child.waitFor(/idem gateway listening on (http:\/\/\S+),/);
  return { child, url: match[1]! };
}

describe('idem gateway: a bad configuration exits 2 and names the field', () => {
  const cases: Array<[string, string, string[], RegExp]> = [
    ['an unknown field', 'unknown.json', [], /error: idem gateway: routes\[0\]\.metods is not a known field/],
    ['a route without a principal', 'noprincipal.json', [], /error: idem gateway: routes\[0\]\.principal is not set/],
    ['a bad method', 'method.json', [], /error: idem gateway: routes\[0\]\.methods\[0\] must be an upper-case HTTP method/],
    ['YAML that does not parse', 'broken.yaml', [], /error: idem gateway: config file .* is not valid YAML/],
    ['a store URL of another kind', 'store.json', ['--store', 'mongodb://127.0.0.1:27017'], /error: idem gateway: store must be a postgres/],
    ['no store at all', 'nostore.json', [], /error: idem gateway: store is not set/],
  ];
  const files: Record<string, string> = {
    'unknown.json': JSON.stringify({ upstream: 'http://127.0.0.1:1', store: 'memory', principal: 'none', routes: [{ path: '/v1/*', metods: ['POST'] }] }),
    'noprincipal.json': JSON.stringify({ upstream: 'http://127.0.0.1:1', store: 'memory', routes: [{ path: '/v1/*' }] }),
    'method.json': JSON.stringify({ upstream: 'http://127.0.0.1:1', store: 'memory', principal: 'none', routes: [{ path: '/v1/*', methods: ['post'] }] }),
    'broken.yaml': 'upstream: http://127.0.0.1:1\nroutes: [ { path: /v1/* \n',
    'store.json': JSON.stringify({ upstream: 'http://127.0.0.1:1', principal: 'none', routes: [{ path: '/v1/*' }] }),
    'nostore.json': JSON.stringify({ upstream: 'http://127.0.0.1:1', principal: 'none', routes: [{ path: '/v1/*' }] }),
  };
  for (const [what, file, extra, message] of cases) {
    it(what, async () => {
      const child = spawnTs('src/cli/main.ts', {}, ['gateway', '--config', configFile(file, files[file]!), ...extra]);
      const exit = await exitOf(child);
      assert.equal(exit.code, 2, child.output());
      assert.match(child.output(), message);
    });
  }
});

describe('idem gateway: SIGTERM drains the request in flight', () => {
  let upstream: PythonUpstream;
  before(async () => {
    upstream = await startPythonUpstream();
  });
  after(() => upstream.stop());

  it('answers the held request after SIGTERM, then exits 0 (YAML config, memory store)', async () => {
    await upstream.arm();
    const path = configFile(
      'drain.yaml',
      `upstream: ${upstream.url}\nlisten: 127.0.0.1:0\nstore: memory\nprincipal: none\nroutes:\n  - path: /v1/*\n    methods: [POST]\n`,
    );
    const { child, url } = await startGatewayProcess(['--config', path]);
    const key = randomUUID();
    const answer = post(`${url}/v1/charges`, { 'idempotency-key': key, 'x-mode': 'hold' }, '{}');
    while ((await upstream.state()).inflight === 0) await new Promise((resolve) => setTimeout(resolve, 50));
    child.child.kill('SIGTERM');
    await child.waitFor(/draining in-flight requests/);
    await upstream.release();
    assert.equal((await answer).status, 201);
    const exit = await exitOf(child);
    assert.equal(exit.code, 0, child.output());
    assert.match(child.output(), /idem gateway stopped/);
  });
});

/** Drops what a drill left in its store (`--store` URL, `--table` name). */
async function dropDrillTable(kind: string, url: string, table: string): Promise<void> {
  if (kind === 'DATABASE_URL') {
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    await pool.query(`DROP TABLE IF EXISTS ${table}_blobs, ${table} CASCADE; DROP SEQUENCE IF EXISTS ${table}_lock_version_seq`).catch(() => undefined);
    await pool.end();
  } else if (kind === 'MYSQL_URL') {
    const { default: mysql } = await import('mysql2/promise');
    const db = await mysql.createConnection(url);
    await db.query(`DROP TABLE IF EXISTS \`${table}_blobs\`, \`${table}\`, \`${table}_tokens\``).catch(() => undefined);
    await db.end();
  }
  // Redis: the keys sit under their own prefix (the table name) and expire with their retention.
}

// `--store` on each kind the CLI opens: PostgreSQL, MySQL/MariaDB and Redis.
for (const [name, variable] of [
  ['PostgreSQL', 'DATABASE_URL'],
  ['MariaDB', 'MYSQL_URL'],
  ['Redis', 'REDIS_URL'],
] as const)
  describe(`idem gateway: crash drill on ${name}`, { skip: needs(variable) }, () => {
    let upstream: PythonUpstream;
    const table = `gw_drill_${process.pid}`;
    const databaseUrl = serviceUrl(variable)!;
    before(async () => {
      upstream = await startPythonUpstream();
    });
    after(async () => {
      await upstream.stop();
      await dropDrillTable(variable, databaseUrl, table);
    });

    it('a gateway SIGKILLed mid-request, restarted: the retry after the lease carries a higher token, 0 double effects', async () => {
      await upstream.arm();
      const path = configFile(
        'drill.json',
        JSON.stringify({
          upstream: upstream.url,
          listen: '127.0.0.1:0',
          principal: { hash: 'authorization' },
          leaseMs: 2000,
          routes: [{ path: '/v1/*', methods: ['POST'] }],
        }),
      );
      const args = ['--config', path, '--store', databaseUrl, '--table', table];
      const first = await startGatewayProcess(args);
      const key = randomUUID();
      const headers = { authorization: 'Bearer drill', 'idempotency-key': key };
      const lost = post(`${first.url}/v1/charges`, { ...headers, 'x-mode': 'hold' }, '{"amount":42}').catch((error: unknown) => error);
      // The upstream holds the first attempt: the gateway dies while it does.
      while ((await upstream.state()).inflight === 0) await new Promise((resolve) => setTimeout(resolve, 50));
      await first.child.kill('SIGKILL');
      assert.ok((await lost) instanceof Error, 'the client lost its connection');

      const second = await startGatewayProcess(args);
      try {
        const taken = await retryUntilTakenOver(`${second.url}/v1/charges`, headers, '{"amount":42}');
        assert.equal(taken.status, 201, taken.bytes.toString());
        const seen = (await upstream.state()).seen.filter((s) => s.headers['idempotency-key'] === key);
        assert.equal(seen.length, 2);
        const [t1, t2] = seen.map((s) => Number(s.headers['idem-fencing-token']));
        assert.ok(t2! > t1!, `the takeover's token ${t2} is higher than the dead attempt's ${t1}`);
        // The dead gateway's attempt wakes in the upstream now: its lower token is refused.
        await upstream.release();
        await upstream.settled();
        const effects = (await upstream.state()).effects.filter((e) => e.key === key);
        assert.equal(effects.length, 1, 'no double effect');
        assert.equal(effects[0]!.token, t2);
        const replay = await post(`${second.url}/v1/charges`, headers, '{"amount":42}');
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(replay.bytes, taken.bytes);
      } finally {
        await stopChild(second.child);
      }
    });
  });
