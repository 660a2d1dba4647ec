/**
 * The service under the connection-fault contract, run as a child process: idem's web core
 * served over HTTP on loopback, its store on the client of the entry named by `FAULT_CLIENT`
 * (./entries.ts), every server reached through the proxy `FAULT_VIA` names. `POST /charge`
 * claims the key, runs one phase and answers 201; `POST /charge-held` also waits 300 ms inside
 * the phase, printing `in phase …` and `phase body done …` around the wait; `GET /ping` answers
 * at once without the store (the contract's measure of the machine's own delay).
 *
 * It installs no `uncaughtException` or `unhandledRejection` handler: a fault that reaches one
 * ends the process, which is what the contract watches for. Prints `listening <port>` once ready.
 *
 * Environment: FAULT_CLIENT (entry name), FAULT_VIA (JSON: { "host:port": proxyPort }),
 * FAULT_NAME (table or key prefix), FAULT_STORE_TIMEOUT_MS.
 */
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { HttpIdempotency } from '../../../src/http/idempotency.js';
import { faultEntries } from './entries.js';

const entry = faultEntries.find((e) => e.name === process.env.FAULT_CLIENT);
if (!entry) throw new Error(`no fault entry named ${process.env.FAULT_CLIENT}`);
const via = JSON.parse(process.env.FAULT_VIA ?? '{}') as Record<string, number>;
const storeTimeoutMs = Number(process.env.FAULT_STORE_TIMEOUT_MS);

const { store } = await entry.open({
  via: (server) => {
    const port = via[`${server.host}:${server.port}`];
    if (port === undefined) throw new Error(`no proxy in front of ${server.host}:${server.port}`);
    return { host: '127.0.0.1', port };
  },
  name: process.env.FAULT_NAME!,
  storeTimeoutMs,
});

const idem = new HttpIdempotency({ store, leaseMs: 10_000, required: true, onHandlerError: () => undefined });
let charges = 0;
const fetch = (request: Request) =>
  new URL(request.url).pathname === '/ping'
    ? new Response('pong')
    : idem.handle(request, async (req, ctx) => {
        const held = new URL(req.url).pathname === '/charge-held';
        const charge = await ctx!.phase('charge', async () => {
          const id = `ch_${++charges}`;
          if (held) {
            // The contract stalls the proxies while the phase body runs, then cuts the connection
            // under the phase's next statement (idem's fenced write, or the COMMIT).
            console.log(`in phase ${id}`);
            await new Promise((resolve) => setTimeout(resolve, 300));
            console.log(`phase body done ${id}`);
          }
          return { id };
        });
        return Response.json(charge, { status: 201 });
      });

const server = serve({ fetch, port: 0, hostname: '127.0.0.1' }, (info: AddressInfo) => console.log(`listening ${info.port}`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
