/**
 * Profiling aid (not part of the suite): CPU per NEW idempotency key on Express with idem's
 * Redis store, against `@node-idempotency` with its Redis adapter (the peers table's fastest
 * correct Redis peer), A/B between source trees in one run. A private `redis-server` (its own
 * port, persistence off, like the shared one) so that its CPU is ours alone: per request the
 * Express server's own `process.cpuUsage()`, the Redis process's CPU (/proc) and each
 * command's server time (`INFO commandstats`). Trees and routes alternate within each round.
 *
 *   git archive main src | tar -x -C scratch/base          # the "before" tree
 *   node --import tsx bench/new-key-cpu-redis.ts [rounds] [requests] [srcRoot,…]
 *
 * Defaults: 3 rounds, 6,000 requests per measurement, trees `scratch/base/src,src`. With
 * `--cpu-prof` in IDEM_PROF_DIR the servers write CPU profiles there.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import autocannon from 'autocannon';

const BODY = JSON.stringify({ amount: 100, currency: 'eur', items: [{ sku: 'a-1', qty: 2 }], note: 'x' });

if (process.argv[2] === 'serve') {
  const [, , , root, redisUrl] = process.argv as string[];
  const src = (p: string) => pathToFileURL(path.resolve(root!, p)).href;
  const { RedisStore } = (await import(src('redis/index.js'))) as typeof import('../src/redis/index.js');
  const { idempotency } = (await import(src('express/index.js'))) as typeof import('../src/express/index.js');
  const { createClient } = await import('@redis/client');
  const express = (await import('express')).default;
  const client = createClient({ url: redisUrl });
  await client.connect();
  const prefix = `nkr${randomUUID().slice(0, 8)}`;
  const app = express();
  app.get('/__cpu', (_req, res) => {
    const u = process.cpuUsage();
    res.json({ us: u.user + u.system });
  });
  app.post('/bare', express.json(), (_req, res) => {
    res.status(201).json({ ok: true });
  });
  const idem = idempotency({ store: new RedisStore({ client, prefix: `${prefix}-idem` }) });
  app.post('/idem-redis', express.json(), idem, (_req, res) => {
    res.status(201).json({ ok: true });
  });
  const { MemoryStore } = (await import(src('memory/index.js'))) as typeof import('../src/memory/index.js');
  const idemMemory = idempotency({ store: new MemoryStore() });
  app.post('/idem-memory', express.json(), idemMemory, (_req, res) => {
    res.status(201).json({ ok: true });
  });
  app.use(idem.onError);
  // The peer exactly as bench/lib/server.ts mounts it.
  const { Idempotency } = await import('@node-idempotency/core');
  const { RedisStorageAdapter } = await import('@node-idempotency/storage-adapter-redis');
  const storage = new RedisStorageAdapter({ url: redisUrl });
  await storage.connect();
  const ni = new Idempotency(storage, { cacheKeyPrefix: `${prefix}-ni` });
  app.post('/ni-redis', express.json(), async (req, res) => {
    const params = { headers: req.headers as Record<string, unknown>, path: req.path, method: req.method, body: req.body as Record<string, unknown> };
    const cached = await ni.onRequest<{ ok: true }, unknown>(params);
    if (cached) {
      res.status(201).json(cached.body);
      return;
    }
    const body = { ok: true as const };
    await ni.onResponse(params, { body });
    res.status(201).json(body);
  });
  const server = http.createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  process.once('SIGTERM', () => process.exit(0));
  console.log(JSON.stringify({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }));
} else {
  const rounds = Number(process.argv[2] ?? 3);
  const amount = Number(process.argv[3] ?? 6000);
  const roots = (process.argv[4] ?? 'scratch/base/src,src').split(',');
  const routes = (process.env.ROUTES ?? 'bare,idem-redis,ni-redis').split(',');
  const port = 20000 + Math.floor(Math.random() * 20000);
  const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  const redisUrl = `redis://127.0.0.1:${port}`;
  const { createClient } = await import('@redis/client');
  const admin = createClient({ url: redisUrl });
  for (let i = 0; ; i++) {
    try {
      await admin.connect();
      break;
    } catch {
      if (i > 50) throw new Error('redis-server did not start');
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const ticks = 100; // USER_HZ
  const redisCpuUs = () => {
    const f = readFileSync(`/proc/${redis.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1e6) / ticks;
  };
  const commandStats = async () => {
    const out: Record<string, { calls: number; usec: number }> = {};
    const text = String(await admin.sendCommand(['INFO', 'commandstats']));
    for (const m of text.matchAll(/cmdstat_([a-z|]+):calls=(\d+),usec=(\d+)/g)) out[m[1]!] = { calls: Number(m[2]), usec: Number(m[3]) };
    return out;
  };
  const profDir = process.env.IDEM_PROF_DIR;
  const start = async (root: string) => {
    const flags = profDir ? ['--cpu-prof', `--cpu-prof-dir=${profDir}/${path.basename(path.dirname(path.resolve(root)))}`] : [];
    const child: ChildProcess = spawn(process.execPath, [...flags, '--import', 'tsx', 'bench/new-key-cpu-redis.ts', 'serve', root, redisUrl], {
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
  // Every tree's server stays up for the whole run and the batches alternate between them
  // (ABBA order), so both sides see the same load on this shared machine; each batch's CPU is
  // read on its own and compared with its neighbour of the other tree.
  type Batch = { app: number; redis: number; n: number; cmds: Record<string, { calls: number; usec: number }> };
  const results: Record<string, Batch[]> = {};
  const servers = new Map<string, Awaited<ReturnType<typeof start>>>();
  try {
    for (const root of roots) servers.set(root, await start(root));
    for (const root of roots) for (const route of routes) await load(`${servers.get(root)!.url}/${route}`, 2000); // warm-up
    for (let round = 0; round < rounds; round++) {
      for (const route of routes) {
        for (const root of round % 2 === 0 ? roots : [...roots].reverse()) {
          const server = servers.get(root)!;
          const before = await cpuOf(server.url);
          const rBefore = redisCpuUs();
          const sBefore = await commandStats();
          const n = await load(`${server.url}/${route}`, amount);
          const app = (await cpuOf(server.url)) - before;
          const redisUs = redisCpuUs() - rBefore;
          const sAfter = await commandStats();
          const cmds: Batch['cmds'] = {};
          for (const [name, st] of Object.entries(sAfter)) {
            if (name === 'info') continue;
            const calls = st.calls - (sBefore[name]?.calls ?? 0);
            if (calls > 0) cmds[name] = { calls, usec: st.usec - (sBefore[name]?.usec ?? 0) };
          }
          results[`${route} ${root}`] ??= [];
          results[`${route} ${root}`]!.push({ app, redis: redisUs, n, cmds });
        }
      }
      if ((round + 1) % 5 === 0) console.error(`round ${round + 1}/${rounds} done`);
    }
  } finally {
    for (const server of servers.values()) await server.stop();
    await admin.quit().catch(() => undefined);
    redis.kill('SIGTERM');
  }
  const sum = (bs: Batch[], f: (b: Batch) => number) => bs.reduce((a, b) => a + f(b), 0);
  const perReq = (bs: Batch[], f: (b: Batch) => number) => sum(bs, f) / sum(bs, (b) => b.n);
  const quartiles = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
    return `${q(0.5).toFixed(3)} (${q(0.25).toFixed(3)}-${q(0.75).toFixed(3)})`;
  };
  console.log(`${rounds} rounds × ${amount} new keys per batch, c = 16, trees alternating batch by batch; µs per request over all batches`);
  console.log(
    `| route | tree | server CPU | idem share (route − bare) | Redis process CPU | Redis usec (commandstats) | per command: usec per request (calls per request) |`,
  );
  console.log('|---|---|---:|---:|---:|---:|---|');
  for (const route of routes) {
    for (const root of roots) {
      const bs = results[`${route} ${root}`]!;
      const bare = results[`bare ${root}`];
      const app = perReq(bs, (b) => b.app);
      const share = bare ? app - perReq(bare, (b) => b.app) : NaN;
      const names = [...new Set(bs.flatMap((b) => Object.keys(b.cmds)))].sort();
      // Commands a script calls are counted in its own usec too: the total is the scripts' plus the
      // other commands' when no script ran (the peer's plain SETs).
      const total = perReq(bs, (b) => {
        const scripts = (b.cmds.evalsha?.usec ?? 0) + (b.cmds.eval?.usec ?? 0) + (b.cmds.fcall?.usec ?? 0);
        return scripts > 0 ? scripts : Object.values(b.cmds).reduce((a, c) => a + c.usec, 0);
      });
      const cmd = names
        .map((nm) => `${nm} ${perReq(bs, (b) => b.cmds[nm]?.usec ?? 0).toFixed(1)} (×${perReq(bs, (b) => b.cmds[nm]?.calls ?? 0).toFixed(2)})`)
        .join(', ');
      console.log(`| ${route} | ${root} | ${app.toFixed(1)} | ${share.toFixed(1)} | ${perReq(bs, (b) => b.redis).toFixed(1)} | ${total.toFixed(1)} | ${cmd} |`);
    }
  }
  if (roots.length === 2) {
    console.log('\nPer batch pair, new tree / old tree: median (quartiles)');
    for (const route of routes) {
      const [a, b] = roots.map((r) => results[`${route} ${r}`]!);
      const app = a!.map((x, i) => b![i]!.app / b![i]!.n / (x.app / x.n));
      const ev = (x: Batch) => (x.cmds.evalsha?.usec ?? 0) + (x.cmds.eval?.usec ?? 0) + (x.cmds.fcall?.usec ?? 0);
      const scripts = a!.map((x, i) => ev(b![i]!) / b![i]!.n / (ev(x) / x.n));
      const finite = scripts.filter(Number.isFinite);
      console.log(`${route}: server CPU ${quartiles(app)}${finite.length === 0 ? '' : `, scripts' usec ${quartiles(finite)}`}`);
    }
  }
}
