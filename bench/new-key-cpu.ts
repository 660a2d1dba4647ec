/**
 * Profiling aid (not part of the suite): the server's CPU per NEW idempotency key on the HTTP
 * path (adapter → HTTP core → engine → store claim → handler → finish → response), A/B between
 * source trees in one run. Each case is a server child process (this file, `serve` mode) with a
 * bare route and idem on the in-memory store and on PostgreSQL, for Express and Hono; autocannon
 * sends fresh keys at 16 connections and the server's `process.cpuUsage()` is read before and
 * after. Reported: CPU µs per request, and idem's own share (route minus bare).
 *
 *   git archive main src | tar -x -C scratch/base          # the "before" tree
 *   node --import tsx bench/new-key-cpu.ts [rounds] [requests] [srcRoot,…]
 *
 * Defaults: 3 rounds, 6,000 requests per measurement, trees `scratch/base/src,src`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import autocannon from 'autocannon';

const BODY = JSON.stringify({ amount: 100, currency: 'eur', items: [{ sku: 'a-1', qty: 2 }], note: 'x' });

if (process.argv[2] === 'serve') {
  const [, , , root, framework, databaseUrl, table] = process.argv as string[];
  const src = (p: string) => pathToFileURL(path.resolve(root!, p)).href;
  const { MemoryStore } = (await import(src('memory/index.js'))) as typeof import('../src/memory/index.js');
  const { PostgresStore } = (await import(src('postgres/index.js'))) as typeof import('../src/postgres/index.js');
  const pg = (await import('pg')).default;
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 16 });
  const pgStore = new PostgresStore({ client: pool, table: table! });
  await pgStore.migrate();
  const memory = new MemoryStore();
  const cpu = () => {
    const u = process.cpuUsage();
    return { us: u.user + u.system };
  };
  let url: string;
  if (framework === 'express') {
    const express = (await import('express')).default;
    const { idempotency } = (await import(src('express/index.js'))) as typeof import('../src/express/index.js');
    const app = express();
    app.get('/__cpu', (_req, res) => {
      res.json(cpu());
    });
    app.post('/bare', express.json(), (_req, res) => {
      res.status(201).json({ ok: true });
    });
    const idemMemory = idempotency({ store: memory });
    const idemPg = idempotency({ store: pgStore });
    app.post('/memory', express.json(), idemMemory, (_req, res) => {
      res.status(201).json({ ok: true });
    });
    app.post('/pg', express.json(), idemPg, (_req, res) => {
      res.status(201).json({ ok: true });
    });
    app.use(idemMemory.onError);
    const server = http.createServer(app);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  } else {
    const { Hono } = await import('hono');
    const { serve } = await import('@hono/node-server');
    const { idempotency } = (await import(src('hono/index.js'))) as typeof import('../src/hono/index.js');
    const app = new Hono();
    app.get('/__cpu', (c) => c.json(cpu()));
    app.post('/bare', (c) => c.json({ ok: true }, 201));
    app.post('/memory', idempotency({ store: memory }), (c) => c.json({ ok: true }, 201));
    app.post('/pg', idempotency({ store: pgStore }), (c) => c.json({ ok: true }, 201));
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
    await new Promise<void>((resolve) => server.once('listening', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }
  // A clean exit on SIGTERM, so `--cpu-prof` writes its profile.
  process.once('SIGTERM', () => process.exit(0));
  console.log(JSON.stringify({ url }));
} else {
  const rounds = Number(process.argv[2] ?? 3);
  const amount = Number(process.argv[3] ?? 6000);
  const roots = (process.argv[4] ?? 'scratch/base/src,src').split(',');
  const databaseUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
  const routes = ['bare', 'memory', 'pg'];
  const start = async (root: string, framework: string, table: string) => {
    const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'bench/new-key-cpu.ts', 'serve', root, framework, databaseUrl, table], {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, NODE_ENV: 'production' },
    });
    const url = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout! }).once('line', (l) => resolve((JSON.parse(l) as { url: string }).url));
      child.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
    });
    return { url, stop: () => new Promise<void>((r) => (child.exitCode !== null ? r() : (child.once('exit', () => r()), child.kill('SIGTERM')))) };
  };
  const cpuOf = async (url: string) => ((await (await fetch(`${url}/__cpu`)).json()) as { us: number }).us;
  const load = async (url: string, n: number) => {
    const r = await autocannon({
      url,
      connections: 16,
      amount: n,
      requests: [
        {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: BODY,
          setupRequest: (req: { headers?: Record<string, string> }) => {
            req.headers = { ...req.headers, 'idempotency-key': randomUUID() };
            return req;
          },
        },
      ],
    } as autocannon.Options);
    if (r.non2xx || r.errors) throw new Error(`${url}: ${r.non2xx} non-2xx, ${r.errors} errors`);
    return r['2xx'];
  };
  const results: Record<string, number[]> = {};
  const pg = (await import('pg')).default;
  const admin = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  for (let round = 0; round < rounds; round++) {
    for (const framework of ['express', 'hono']) {
      for (const root of roots) {
        const table = `nkcpu_${randomUUID().slice(0, 8)}`;
        const server = await start(root, framework, table);
        try {
          for (const route of routes) await load(`${server.url}/${route}`, 1500); // warm-up
          for (const route of routes) {
            const before = await cpuOf(server.url);
            const n = await load(`${server.url}/${route}`, amount);
            const us = (await cpuOf(server.url)) - before;
            const k = `${framework} ${route} ${root}`;
            results[k] = [...(results[k] ?? []), us / n];
          }
        } finally {
          await server.stop();
          await admin.query(`DROP TABLE IF EXISTS ${table}`).catch(() => undefined);
        }
      }
    }
  }
  await admin.end();
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  console.log(`| framework | route | ${roots.map((r) => `${r} µs/req (idem share)`).join(' | ')} | ratio idem share |`);
  console.log(`|---|---|${roots.map(() => '---|').join('')}---|`);
  for (const framework of ['express', 'hono']) {
    for (const route of routes) {
      const cells = roots.map((root) => {
        const v = median(results[`${framework} ${route} ${root}`]!);
        const share = v - median(results[`${framework} bare ${root}`]!);
        return { v, share };
      });
      const ratio = route === 'bare' ? '' : (cells[cells.length - 1]!.share / cells[0]!.share).toFixed(2);
      console.log(`| ${framework} | ${route} | ${cells.map((c) => `${c.v.toFixed(0)} (${c.share.toFixed(0)})`).join(' | ')} | ${ratio} |`);
    }
  }
}
