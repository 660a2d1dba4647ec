/**
 * The processes of the `gateway` bench section (bench/gateway.ts), one per role, each printing
 * `{"url": …}` once it listens and stopping on SIGTERM:
 *   upstream            the bare service: reads the body, answers 201 with a 1 KB JSON body
 *   proxy <upstream>    a plain reverse proxy on undici (the floor: forwarding alone)
 *   gateway <upstream>  `createGateway` (idem/gateway) on a PostgresStore at DATABASE_URL
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { Pool } from 'undici';
import { createGateway } from '../../src/gateway/index.js';
import { PostgresStore } from '../../src/postgres/store.js';
import { dropTable } from './fixtures.js';

const [role, upstream] = process.argv.slice(2);
const BODY = JSON.stringify({ id: 'ch_1', amount: 100, currency: 'eur', pad: 'x'.repeat(960) });

async function listen(server: http.Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

let url: string;
let stop: () => Promise<void>;
if (role === 'upstream') {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(201, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY) });
      res.end(BODY);
    });
  });
  server.keepAliveTimeout = 60_000;
  url = await listen(server);
  stop = () => new Promise((resolve) => server.close(() => resolve()));
} else if (role === 'proxy') {
  const pool = new Pool(upstream!, { connections: 128 });
  const server = http.createServer(async (req, res) => {
    try {
      const out = await pool.request({ path: req.url ?? '/', method: req.method as 'POST', headers: req.headers as Record<string, string>, body: req });
      res.writeHead(out.statusCode, out.headers as http.OutgoingHttpHeaders);
      for await (const chunk of out.body) res.write(chunk);
      res.end();
    } catch {
      res.writeHead(502).end();
    }
  });
  server.keepAliveTimeout = 60_000;
  url = await listen(server);
  stop = async () => {
    await new Promise((resolve) => server.close(resolve));
    await pool.close();
  };
} else if (role === 'gateway') {
  const client = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test', max: 32 });
  const table = `bench_gw_${randomUUID().slice(0, 8)}`;
  const store = new PostgresStore({ client, table });
  await store.migrate();
  const gateway = createGateway({ store, config: { listen: '127.0.0.1:0', upstream, principal: 'none', routes: [{ path: '/*', methods: ['POST'] }] } });
  url = await gateway.listen();
  stop = async () => {
    await gateway.close();
    await dropTable(client, table);
    await client.end();
  };
} else {
  throw new Error(`unknown role ${role}`);
}
process.stdout.write(`${JSON.stringify({ url })}\n`);
process.on('SIGTERM', () => {
  void stop().finally(() => process.exit(0));
});
