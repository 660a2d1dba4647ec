/**
 * `npm start`: the example payments API on embedded PGlite (IDEM_DATA_DIR, default
 * ./.idem-data), on PostgreSQL when DATABASE_URL is set, or on MySQL / MariaDB when
 * DATABASE_URL is a mysql:// URL (mysql.ts). PORT defaults to 3000.
 *
 * Environment: PSP_LATENCY_MS (50), PSP_FAILURE_RATE (0), IDEM_LEASE_MS (60000),
 * IDEM_RETENTION_MS (86400000), HOST (127.0.0.1), PG_POOL_MAX (20),
 * REDIS_URL (claims and replays in Redis, phases atomic in the database: see redis.ts),
 * IDEM_COMPLETER_INTERVAL_MS (10000; 0 turns the background completer off; request snapshots
 * are stored either way, for `idem complete`), IDEM_COMPLETER_GRACE_MS (10000: how long after its lease ended a
 * key counts as abandoned, so a client's own retry usually gets there first), IDEM_EVENT_LOG (1: one `idem-event {json}` line per taken-over /
 * lease-lost / discarded event, for chaos runs), IDEM_STORE_TIMEOUT_MS (5000: the deadline of each
 * database statement and of `/readyz`), PG_CONNECT_TIMEOUT_MS (5000), PG_QUERY_TIMEOUT_MS (10000).
 * IDEM_OTEL (console: OpenTelemetry spans and
 * metrics on stdout, see otel.ts), IDEM_WAIT_MS (0: a duplicate of a charge in progress waits
 * this long for its result instead of a 409), IDEM_DISTRIBUTED (citus: DATABASE_URL is a Citus
 * coordinator; the tables are distributed by tenant, co-located). PAYMENTS_CRASH_AT and PAYMENTS_CRASH_RATE
 * are test-only faults (see app.ts).
 */
import { serve } from '@hono/node-server';
import { createPaymentsApp, migrate } from './app.js';
import { type Database, openDatabase } from './db.js';
import { setupTelemetry } from './otel.js';
import { FakePsp } from './psp.js';
import type { IdempotencyEvent } from 'idem';
import { openRedisClaims, type RedisClaims } from './redis.js';

const env = process.env;
const port = Number(env.PORT ?? 3000);
const host = env.HOST ?? '127.0.0.1';

let db: Database | undefined;
let redis: RedisClaims | undefined;
try {
  db = await openDatabase(env);
  // IDEM_MIGRATE=0: the tables exist already (the chaos harness migrates once up front).
  // IDEM_DISTRIBUTED=citus: DATABASE_URL is a Citus coordinator (docs/citus.md).
  const distributed = env.IDEM_DISTRIBUTED === 'citus' ? ('citus' as const) : undefined;
  if (env.IDEM_DISTRIBUTED !== undefined && !distributed) throw new Error("IDEM_DISTRIBUTED must be 'citus' or unset");
  if (env.IDEM_MIGRATE !== '0') await migrate(db.client, { distributed });
  const psp = new FakePsp(db.client, {
    latencyMs: Number(env.PSP_LATENCY_MS ?? 50),
    failureRate: Number(env.PSP_FAILURE_RATE ?? 0),
  });
  // REDIS_URL: claims and replays in Redis, phases still atomic in this database (redis.ts).
  redis = await openRedisClaims(db.client, env);
  const otel = await setupTelemetry(env);
  const completerIntervalMs = Number(env.IDEM_COMPLETER_INTERVAL_MS ?? 10_000);
  if (!(completerIntervalMs >= 0)) throw new Error('IDEM_COMPLETER_INTERVAL_MS must be a number of ms >= 0');
  const { app, completer } = createPaymentsApp({
    db: db.client,
    psp,
    ...(redis ? { store: redis.store } : {}),
    leaseMs: env.IDEM_LEASE_MS ? Number(env.IDEM_LEASE_MS) : undefined,
    retentionMs: env.IDEM_RETENTION_MS ? Number(env.IDEM_RETENTION_MS) : undefined,
    crashAt: env.PAYMENTS_CRASH_AT,
    crashRate: Number(env.PAYMENTS_CRASH_RATE ?? 0),
    // Request snapshots are always stored, so `idem complete` (cron) can finish a crashed
    // charge even when the background completer is off.
    completer: true,
    completerGraceMs: Number(env.IDEM_COMPLETER_GRACE_MS ?? 10_000),
    storeTimeoutMs: Number(env.IDEM_STORE_TIMEOUT_MS ?? 5000),
    ...(env.IDEM_EVENT_LOG === '1' ? { onEvent: logEvent } : {}),
    ...(otel ? { telemetry: otel.telemetry } : {}),
    waitMs: Number(env.IDEM_WAIT_MS ?? 0),
    ...(distributed ? { distributed } : {}),
  });
  // Finishes charges whose client never retried (see src/http/completer.ts).
  if (completerIntervalMs > 0)
    completer?.start(completerIntervalMs, (error) => console.error(`payments: completer pass failed: ${(error as Error)?.message ?? error}`));
  const opened = db;
  const claims = redis;
  const server = serve({ fetch: app.fetch, port, hostname: host }, (info) => {
    const url = `http://${host}:${info.port}`;
    console.log(`idem example payments API listening on ${url} (${opened.kind}: ${opened.location}${claims ? `; claims in Redis: ${claims.location}` : ''})
Try:
  curl -s ${url}/healthz            # the process is alive
  curl -s ${url}/readyz             # the database answers within the deadline (503 when not)
  curl -si ${url}/v1/charges -H 'Authorization: Bearer sk_test_alice' -H 'Idempotency-Key: order-1001' \\
       -H 'Content-Type: application/json' -d '{"amount": 1999, "currency": "usd", "customer": "cus_alice"}'
  # the same command again replays the first response (Idempotent-Replayed: true)
  curl -s ${url}/v1/psp/charges     # one PSP charge per idempotency key`);
  });
  server.on('error', (error: NodeJS.ErrnoException) => {
    fail(error.code === 'EADDRINUSE' ? `port ${port} on ${host} is in use; set PORT to another port` : error.message);
  });

  let stopping = false;
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      if (stopping) return;
      stopping = true;
      server.close(() => {
        void completer?.stop();
        Promise.allSettled([claims?.close(), otel?.shutdown(), opened.close()]).finally(() => process.exit(0));
      });
      setTimeout(() => process.exit(0), 3000).unref();
    });
  }
} catch (error) {
  fail((error as Error).message ?? String(error));
}

/** Startup failures: one clear line, the database closed, exit 1. */
function fail(message: string): never {
  console.error(`idem example: cannot start: ${message}`);
  const done = () => process.exit(1);
  if (db) db.close().then(done, done);
  else done();
  // process.exit above runs once the database is closed
  return undefined as never;
}

/** Events a chaos supervisor counts: takeovers, fenced (stale) writes, discards. */
function logEvent(event: IdempotencyEvent): void {
  if (event.type === 'taken-over' || event.type === 'lease-lost' || event.type === 'discarded') {
    console.log(`idem-event ${JSON.stringify({ type: event.type, key: event.key, token: event.token })}`);
  }
}
