/**
 * The Next.js example (examples/next, the README's snippet) as users run it: `next build`
 * (once, shared with test/adapters-next.test.ts) and `next start` as a child process on a
 * free port, with the store it picks itself: an in-memory PGlite inside the Next server
 * (serverExternalPackages), and PostgreSQL when DATABASE_URL is set (on a random table).
 * Everything shared with the other adapters runs in the contract suite.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import pg from 'pg';
import { tableName } from './helpers/engines.js';
import { assertProblem, poll, requestInit } from './helpers/http.js';
import { ensureNextBuild, NEXT_APP, ROOT } from './helpers/next-build.js';

/** A port nothing listens on right now (the OS picks it). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

/** Starts `next start` on the built example; resolves once it answers HTTP. */
async function startExample(env: Record<string, string>): Promise<{ url: string; child: ChildProcess; output: () => string }> {
  const port = await freePort();
  const child = spawn(process.execPath, [path.join(ROOT, 'node_modules/next/dist/bin/next'), 'start', NEXT_APP, '-p', String(port), '-H', '127.0.0.1'], {
    cwd: ROOT,
    env: { ...process.env, NEXT_TELEMETRY_DISABLED: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c));
  child.stderr!.on('data', (c: Buffer) => (output += c));
  const url = `http://127.0.0.1:${port}`;
  await poll(
    async () => {
      if (child.exitCode !== null) assert.fail(`next start exited with ${child.exitCode}:\n${output}`);
      return fetch(url + '/api/charges', { method: 'GET' }).then(
        () => true,
        () => undefined,
      );
    },
    120_000,
    'next start to answer',
    200,
  );
  return { url, child, output: () => output };
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

let buildMs = 0;
before(
  async () => {
    buildMs = await ensureNextBuild();
    if (buildMs > 0) console.log(`# next build took ${Math.round(buildMs)} ms`);
  },
  { timeout: 600_000 },
);

const stores: Array<{ name: string; env(): Promise<{ env: Record<string, string>; drop(): Promise<void> }> }> = [
  { name: 'PGlite inside the Next server', env: async () => ({ env: { DATABASE_URL: '' }, drop: async () => undefined }) },
];
if (process.env.DATABASE_URL) {
  stores.push({
    name: 'PostgreSQL',
    env: async () => {
      const table = tableName('idem_next');
      return {
        env: { DATABASE_URL: process.env.DATABASE_URL!, IDEM_TABLE: table },
        drop: async () => {
          const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
          await client.connect();
          for (const t of [`${table}_blobs`, table]) await client.query(`DROP TABLE IF EXISTS "${t}"`);
          await client.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
          await client.end();
        },
      };
    },
  });
}

for (const store of stores) {
  describe(`examples/next under next start, on ${store.name}`, () => {
    let server: Awaited<ReturnType<typeof startExample>>;
    let drop: () => Promise<void> = async () => undefined;
    before(
      async () => {
        const chosen = await store.env();
        drop = chosen.drop;
        server = await startExample(chosen.env);
      },
      { timeout: 180_000 },
    );
    after(async () => {
      if (server) await stop(server.child);
      await drop();
    });
    const post = (s: Parameters<typeof requestInit>[0]) => fetch(server.url + '/api/charges', requestInit(s));

    it('POST without a key gets the 400 idempotency-key-missing problem (required: true)', async () => {
      await assertProblem(await post({ json: { amount: 1000 } }), 400, 'idempotency-key-missing');
    });

    it('a charge is created once: the retry replays status, body and Location byte for byte', async () => {
      const first = await post({ key: 'next-charge-1', json: { amount: 1000 } });
      assert.equal(first.status, 201, server.output());
      const firstText = await first.text();
      const charge = JSON.parse(firstText) as { id: string; amount: number };
      assert.match(charge.id, /^ch_/);
      assert.equal(charge.amount, 1000);
      assert.equal(first.headers.get('location'), `/api/charges/${charge.id}`);
      assert.equal(first.headers.get('idempotent-replayed'), null);
      const replay = await post({ key: 'next-charge-1', json: { amount: 1000 } });
      assert.equal(replay.status, 201);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(replay.headers.get('location'), first.headers.get('location'));
      assert.equal(await replay.text(), firstText);
    });

    it('the same key with another amount gets 422 idempotency-key-reused', async () => {
      await (await post({ key: 'next-charge-2', json: { amount: 5 } })).arrayBuffer();
      await assertProblem(await post({ key: 'next-charge-2', json: { amount: 6 } }), 422, 'idempotency-key-reused');
    });

    it('a 400 from validation is not stored: the corrected retry with the same key creates the charge', async () => {
      const bad = await post({ key: 'next-charge-3', json: { amount: 'lots' } });
      assert.equal(bad.status, 400);
      assert.deepEqual(await bad.json(), { error: 'amount must be an integer' });
      const fixed = await post({ key: 'next-charge-3', json: { amount: 'lots' } });
      assert.equal(fixed.headers.get('idempotent-replayed'), null, 'the 400 was not replayed');
      await fixed.arrayBuffer();
      const good = await post({ key: 'next-charge-3b', json: { amount: 7 } });
      assert.equal(good.status, 201);
      await good.arrayBuffer();
    });

    it('10 parallel duplicates create one charge: one original 201, the rest replays of it or 409 in progress', async () => {
      const responses = await Promise.all(Array.from({ length: 10 }, () => post({ key: 'next-parallel', json: { amount: 42 } })));
      const results = await Promise.all(
        responses.map(async (r) => ({ status: r.status, replayed: r.headers.get('idempotent-replayed'), text: await r.text() })),
      );
      assert.ok(
        results.every((r) => r.status === 201 || r.status === 409),
        results.map((r) => r.status).join(','),
      );
      const ok = results.filter((r) => r.status === 201);
      assert.equal(ok.filter((r) => r.replayed !== 'true').length, 1, 'exactly one original');
      assert.equal(new Set(ok.map((r) => r.text)).size, 1, 'every 201 carries the same charge');
    });
  });
}
