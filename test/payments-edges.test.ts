/**
 * The example payments API at its failure edges (issue 11), as a real server process over real
 * sockets: bodies PostgreSQL can never store (NUL, invalid UTF-8, lone surrogates) get a 400
 * that leaves the key free; problems carry the docs `Link`; `/healthz` and `/readyz`; and, on
 * real PostgreSQL behind a proxy that goes silent, `/readyz` says 503 within the deadline and
 * 200 again once the database answers, with no restart.
 *
 * Runs on a fresh PGlite data directory always, and on PostgreSQL (a fresh database, reached
 * through {@link startSilentProxy}) when DATABASE_URL is set.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startSilentProxy, type SilentProxy } from './helpers/silent-proxy.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const START_TIMEOUT_MS = 60_000;
const rand = () => randomBytes(6).toString('hex');
/** The example's deadline for its statements and for /readyz (IDEM_STORE_TIMEOUT_MS). */
const STORE_TIMEOUT_MS = 2000;

interface Server {
  url: string;
  output(): string;
  stop(): Promise<void>;
}

const children = new Set<ChildProcess>();
after(() => {
  for (const child of children) child.kill('SIGKILL');
});

/** Starts examples/payments/server.ts; resolves once it prints its URL. */
function startServer(env: Record<string, string>): Promise<Server> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'examples/payments/server.ts'], {
    cwd: ROOT,
    env: {
      ...process.env,
      PORT: '0',
      PSP_LATENCY_MS: '0',
      IDEM_COMPLETER_INTERVAL_MS: '0',
      IDEM_STORE_TIMEOUT_MS: String(STORE_TIMEOUT_MS),
      DATABASE_URL: '',
      REDIS_URL: '', // claims stay in the database under test
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  let output = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => (children.delete(child), resolve())));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${output}`)), START_TIMEOUT_MS);
    let started = false;
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
      if (match && !started) {
        started = true;
        clearTimeout(timer);
        resolve({
          url: match[1]!,
          output: () => output,
          async stop() {
            if (child.exitCode !== null || child.signalCode !== null) return;
            child.kill('SIGTERM');
            const kill = setTimeout(() => child.kill('SIGKILL'), 5000);
            await exited;
            clearTimeout(kill);
          },
        });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    void exited.then(() => {
      if (!started) {
        clearTimeout(timer);
        reject(new Error(`server exited before listening:\n${output}`));
      }
    });
  });
}

const charge = (server: Server, key: string, body: string | Uint8Array, apiKey: string) =>
  fetch(server.url + '/v1/charges', {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'idempotency-key': key, 'content-type': 'application/json' },
    body,
  });

interface Backend {
  name: string;
  env(): Record<string, string>;
}

const backends: Backend[] = [];
{
  let dir: string | undefined;
  backends.push({
    name: 'pglite',
    env: () => {
      dir ??= mkdtempSync(join(tmpdir(), 'idem-edges-'));
      return { IDEM_DATA_DIR: dir };
    },
  });
  after(() => dir && rmSync(dir, { recursive: true, force: true }));
}

let proxy: SilentProxy | undefined;
let databaseUrl: string | undefined;
if (process.env.DATABASE_URL) {
  const adminUrl = process.env.DATABASE_URL;
  const name = `idem_edges_${rand()}`;
  before(async () => {
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name}`);
    await admin.end();
    const target = new URL(adminUrl);
    proxy = await startSilentProxy({ host: target.hostname, port: Number(target.port || 5432) });
    const url = new URL(adminUrl);
    url.pathname = '/' + name;
    url.port = String(proxy.port);
    databaseUrl = url.toString();
  });
  after(async () => {
    await proxy?.close();
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  });
  backends.push({ name: 'postgres', env: () => ({ DATABASE_URL: databaseUrl! }) });
}

for (const backend of backends) {
  describe(`example payments API edges on ${backend.name}`, () => {
    let server: Server;
    before(async () => {
      server = await startServer(backend.env());
    });
    after(async () => {
      await server?.stop();
    });

    it('NUL, invalid UTF-8 and a lone surrogate in a string field: 400 with the docs Link, and the key stays free', async () => {
      const apiKey = `sk_${rand()}`;
      const cases: Array<[string, string | Uint8Array]> = [
        ['NUL in customer', JSON.stringify({ amount: 100, currency: 'usd', customer: 'cus_\u0000x' })],
        ['NUL in a metadata value', JSON.stringify({ amount: 100, currency: 'usd', customer: 'cus_1', metadata: { order: 'a\u0000' } })],
        ['a lone surrogate', '{"amount":100,"currency":"usd","customer":"cus_\\ud800"}'],
        ['invalid UTF-8', Buffer.concat([Buffer.from('{"amount":100,"currency":"usd","customer":"cus_'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')])],
      ];
      for (const [what, body] of cases) {
        const key = `bad-${rand()}`;
        const res = await charge(server, key, body, apiKey);
        const text = await res.text();
        assert.equal(res.status, 400, `${what}: ${text}`);
        assert.equal(JSON.parse(text).type, 'urn:idem:example:payments:invalid-request', what);
        assert.equal(res.headers.get('link'), '</docs/errors>; rel="describedby"', what);
        const fixed = await charge(server, key, JSON.stringify({ amount: 100, currency: 'usd', customer: 'cus_ok' }), apiKey);
        assert.equal(fixed.status, 201, `${what}: the key was not consumed`);
        await fixed.arrayBuffer();
      }
    });

    it('a 422 (key reused) carries the docs Link; the docs URL lists the problem types', async () => {
      const apiKey = `sk_${rand()}`;
      const key = `k-${rand()}`;
      const first = await charge(server, key, JSON.stringify({ amount: 100, currency: 'usd', customer: 'cus_1' }), apiKey);
      assert.equal(first.status, 201);
      await first.arrayBuffer();
      const reused = await charge(server, key, JSON.stringify({ amount: 200, currency: 'usd', customer: 'cus_1' }), apiKey);
      assert.equal(reused.status, 422);
      assert.equal(reused.headers.get('link'), '</docs/errors>; rel="describedby"');
      await reused.arrayBuffer();
      const docs = (await (await fetch(server.url + '/docs/errors')).json()) as { problems: Record<string, string> };
      assert.ok(docs.problems['urn:idem:problem:idempotency-key-reused']);
    });

    it('/healthz and /readyz answer 200 while the database answers', async () => {
      assert.equal((await fetch(server.url + '/healthz')).status, 200);
      const ready = await fetch(server.url + '/readyz');
      assert.equal(ready.status, 200);
      assert.equal(((await ready.json()) as { ok: boolean }).ok, true);
    });

    if (backend.name === 'postgres') {
      it('a database that goes silent: /readyz and a new charge 503 within the deadline + 1 s while /healthz stays 200; 200 and 201 again after, no restart', {
        timeout: 60_000,
      }, async () => {
        const apiKey = `sk_${rand()}`;
        const warm = await charge(server, `warm-${rand()}`, JSON.stringify({ amount: 100, currency: 'usd', customer: 'cus_1' }), apiKey);
        assert.equal(warm.status, 201);
        await warm.arrayBuffer();
        proxy!.mode('silent');
        try {
          const started = performance.now();
          const ready = await fetch(server.url + '/readyz');
          const elapsedMs = performance.now() - started;
          assert.equal(ready.status, 503);
          assert.equal(ready.headers.get('retry-after'), '1');
          assert.equal(((await ready.json()) as { type: string }).type, 'urn:idem:example:payments:not-ready');
          assert.ok(elapsedMs < STORE_TIMEOUT_MS + 1000, `503 within the deadline + 1 s (took ${Math.round(elapsedMs)} ms)`);
          assert.equal((await fetch(server.url + '/healthz')).status, 200, 'the process is alive');
          const chargeStarted = performance.now();
          const shed = await charge(server, `silent-${rand()}`, JSON.stringify({ amount: 100, currency: 'usd', customer: 'cus_1' }), apiKey);
          const chargeMs = performance.now() - chargeStarted;
          assert.equal(shed.status, 503, await shed.text());
          assert.equal(shed.headers.get('retry-after'), '1');
          assert.ok(chargeMs < STORE_TIMEOUT_MS + 1000, `a new charge gets 503 within the deadline + 1 s (took ${Math.round(chargeMs)} ms)`);
        } finally {
          proxy!.mode('forward');
        }
        const started = performance.now();
        for (;;) {
          const res = await fetch(server.url + '/readyz');
          await res.arrayBuffer();
          if (res.status === 200) break;
          assert.ok(performance.now() - started < 15_000, 'ready again within 15 s');
        }
        const after = await charge(server, `after-${rand()}`, JSON.stringify({ amount: 100, currency: 'usd', customer: 'cus_1' }), apiKey);
        assert.equal(after.status, 201, 'the next charge succeeds with no restart');
        await after.arrayBuffer();
      });
    }
  });
}
