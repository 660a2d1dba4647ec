/**
 * A service on RedisStore as a child process, for the connection-fault tests: one client of
 * the kind FAULT_CLIENT (`node-redis` | `node-redis socketTimeout` (FAULT_SOCKET_TIMEOUT_MS) |
 * `ioredis`) on 127.0.0.1:FAULT_REDIS_PORT, configured as
 * docs/connection-faults-redis.md recommends, `storeTimeoutMs` FAULT_STORE_TIMEOUT_MS, served over
 * HTTP with the web core. Prints `listening <port>`; every handler run prints `ran`.
 */
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { createClient } from '@redis/client';
import { Redis } from 'ioredis';
import { HttpIdempotency } from '../../src/index.js';
import { RedisStore, type RedisClientLike } from '../../src/redis/index.js';

const env = process.env;
const port = Number(env.FAULT_REDIS_PORT);
const storeTimeoutMs = Number(env.FAULT_STORE_TIMEOUT_MS);

async function open(): Promise<RedisClientLike> {
  if (env.FAULT_CLIENT?.startsWith('node-redis')) {
    const client = createClient({
      url: `redis://127.0.0.1:${port}`,
      // socketTimeout only with a strategy: node-redis's default one gives up on a socket timeout.
      ...(env.FAULT_CLIENT === 'node-redis socketTimeout'
        ? { socket: { socketTimeout: Number(env.FAULT_SOCKET_TIMEOUT_MS), reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, 2000) } }
        : {}),
    });
    client.on('error', () => undefined); // without a listener, a dropped connection's 'error' ends the process
    await client.connect();
    return client;
  }
  const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

const store = new RedisStore({ client: await open(), prefix: `fault-${process.pid}`, storeTimeoutMs });
const idem = new HttpIdempotency({ store, onHandlerError: () => undefined });
const server = serve(
  {
    fetch: (request) =>
      idem.handle(request, async () => {
        console.log('ran');
        return new Response('{"ok":true}', { status: 201, headers: { 'content-type': 'application/json' } });
      }),
    port: 0,
    hostname: '127.0.0.1',
  },
  (info: AddressInfo) => console.log(`listening ${info.port}`),
) as http.Server;
process.on('SIGTERM', () => server.close(() => process.exit(0)));
