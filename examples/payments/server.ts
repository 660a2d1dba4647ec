/**
 * `npm start`: the example payments API on embedded PGlite (IDEM_DATA_DIR, default
 * ./.idem-data) or on PostgreSQL when DATABASE_URL is set. PORT defaults to 3000.
 *
 * Environment: PSP_LATENCY_MS (50), PSP_FAILURE_RATE (0), IDEM_LEASE_MS (60000),
 * IDEM_RETENTION_MS (86400000), HOST (127.0.0.1); PAYMENTS_CRASH_AT is a test-only fault.
 */
import { serve } from '@hono/node-server';
import { createPaymentsApp, migrate } from './app.js';
import { openDatabase } from './db.js';
import { FakePsp } from './psp.js';

const env = process.env;
const port = Number(env.PORT ?? 3000);
const host = env.HOST ?? '127.0.0.1';

const db = await openDatabase(env);
await migrate(db.client);
const psp = new FakePsp(db.client, {
  latencyMs: Number(env.PSP_LATENCY_MS ?? 50),
  failureRate: Number(env.PSP_FAILURE_RATE ?? 0),
});
const { app } = createPaymentsApp({
  db: db.client,
  psp,
  leaseMs: env.IDEM_LEASE_MS ? Number(env.IDEM_LEASE_MS) : undefined,
  retentionMs: env.IDEM_RETENTION_MS ? Number(env.IDEM_RETENTION_MS) : undefined,
  crashAt: env.PAYMENTS_CRASH_AT,
});

const server = serve({ fetch: app.fetch, port, hostname: host }, (info) => {
  const url = `http://${host}:${info.port}`;
  console.log(`idem example payments API listening on ${url} (${db.kind}: ${db.location})
Try:
  curl -s ${url}/healthz
  curl -si ${url}/v1/charges -H 'Authorization: Bearer sk_test_alice' -H 'Idempotency-Key: order-1001' \\
       -H 'Content-Type: application/json' -d '{"amount": 1999, "currency": "usd", "customer": "cus_alice"}'
  # the same command again replays the first response (Idempotent-Replayed: true)
  curl -s ${url}/v1/psp/charges     # one PSP charge per idempotency key`);
});

let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) return;
    stopping = true;
    server.close(() => {
      db.close().finally(() => process.exit(0));
    });
    setTimeout(() => process.exit(0), 3000).unref();
  });
}
