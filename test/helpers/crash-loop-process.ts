/**
 * A process whose handler kills it on every run (protocol.md K23), for the crash-loop tests:
 * it prints `RUN <key>` before it dies, so the parent counts handler runs across restarts.
 *
 * Usage (tsx):
 * - `crash-loop-process.ts http <pg|redis> <table-or-prefix> <exit|sigkill> <maxAttempts>`: an
 *   HTTP server on a free loopback port (idem's web core on node:http, PostgreSQL from
 *   DATABASE_URL or Redis from REDIS_URL); prints `LISTENING <port>`. The handler commits a
 *   phase, prints RUN, then dies.
 * - `crash-loop-process.ts amqp <queue> <table> <dead-letter queue> <exit|sigkill> <maxAttempts>`:
 *   a RabbitMQ consumer (idem on PostgreSQL); prints `READY` once subscribed.
 */
import { createServer } from 'node:http';
import pg from 'pg';
import { HttpIdempotency } from '../../src/http/index.js';
import { IdempotentConsumer } from '../../src/consumer/index.js';
import { PostgresStore } from '../../src/postgres/index.js';
import type { IdempotencyStore } from '../../src/store/types.js';

const [mode, ...args] = process.argv.slice(2) as [string, ...string[]];
const LEASE_MS = 600;

function die(how: string): never {
  if (how === 'sigkill') process.kill(process.pid, 'SIGKILL');
  process.exit(1);
}

if (mode === 'http') {
  const [backend, name, how, max] = args as [string, string, string, string];
  let store: IdempotencyStore;
  if (backend === 'pg') {
    store = new PostgresStore({ client: new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 }), table: name });
  } else {
    const { createClient } = await import('@redis/client');
    const { RedisStore } = await import('../../src/redis/index.js');
    const client = createClient({ url: process.env.REDIS_URL });
    await client.connect();
    store = new RedisStore({ client, prefix: name });
  }
  const idem = new HttpIdempotency({ store, leaseMs: LEASE_MS, heartbeatMs: 200, maxAttempts: Number(max) });
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers.set(k, v);
    const request = new Request(`http://127.0.0.1${req.url}`, { method: req.method, headers, body: chunks.length ? Buffer.concat(chunks) : null });
    const response = await idem.handle(request, async (_request, ctx) => {
      await ctx!.phase('invoice', async () => ({ invoice: 1 }));
      process.stdout.write(`RUN ${ctx!.key}\n`);
      die(how);
    });
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(Buffer.from(await response.arrayBuffer()));
  });
  server.listen(0, '127.0.0.1', () => {
    const address = server.address();
    process.stdout.write(`LISTENING ${typeof address === 'object' && address ? address.port : 0}\n`);
  });
} else if (mode === 'amqp') {
  const [queue, table, deadLetterQueue, how, max] = args as [string, string, string, string, string];
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
  const store = new PostgresStore({ client: pool, table });
  const consumer = new IdempotentConsumer({ store, scope: queue, leaseMs: LEASE_MS, heartbeatMs: 200, retryDelayMs: 50, maxAttempts: Number(max) });
  const amqplib = await import('amqplib');
  const { consumeAmqp } = await import('../../src/amqp/index.js');
  const connection = await amqplib.connect(process.env.AMQP_URL as string);
  const channel = await connection.createConfirmChannel();
  await consumeAmqp({
    channel,
    queue,
    consumer,
    prefetch: 1,
    deadLetter: { exchange: '', routingKey: deadLetterQueue },
    onDisposition: (d) => process.stdout.write(`DISPOSITION ${d.action} ${d.reason}\n`),
    handler: async (ctx) => {
      await ctx.phase('invoice', (tx) => (tx as pg.PoolClient).query(`INSERT INTO ${table}_effects (message_id, note) VALUES ($1, 'invoice')`, [ctx.key]));
      process.stdout.write(`RUN ${ctx.key}\n`);
      die(how);
    },
  });
  process.stdout.write('READY\n');
} else {
  throw new Error(`crash-loop-process: unknown mode ${mode}`);
}
