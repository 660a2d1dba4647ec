/**
 * One completer pass over the example's database, then exit: finishes charges whose worker
 * crashed and whose client never retried (src/http/completer.ts). The server runs the same
 * pass in the background every IDEM_COMPLETER_INTERVAL_MS; this is the one-shot form, for a
 * cron job or an `idem complete` command.
 *
 *   DATABASE_URL=postgres://… npx tsx examples/payments/complete.ts
 *
 * Environment as for server.ts (DATABASE_URL or IDEM_DATA_DIR, PSP_*, IDEM_LEASE_MS,
 * IDEM_RETENTION_MS). Prints the pass's report as JSON.
 */
import { pathToFileURL } from 'node:url';
import type { Completer, CompleterReport } from 'idem';
import type { Queryable, SqlClient } from 'idem/postgres';
import type { IdempotencyStore } from 'idem';
import { createPaymentsApp, migrate } from './app.js';
import { openDatabase } from './db.js';
import { isMySql, type MySqlDatabase, mysqlDatabase } from './mysql.js';
import type { Pool as MySqlPool } from 'mysql2/promise';
import { FakePsp } from './psp.js';
import { openRedisClaims } from './redis.js';

/**
 * Opens the example's database, runs one completer pass, closes the database.
 *
 * @param env where to find the database and the example's settings (like server.ts)
 * @returns what the pass did: found / completed / discarded / failed / lost / skipped keys
 * @throws when the database is unreachable
 */
export async function runCompleterOnce(env: NodeJS.ProcessEnv = process.env): Promise<CompleterReport> {
  const db = await openDatabase(env);
  try {
    const redis = await openRedisClaims(db.client, env);
    try {
      return await (await createCompleter({ client: db.client }, env, redis?.store)).runOnce();
    } finally {
      await redis?.close();
    }
  } finally {
    await db.close();
  }
}

/**
 * The example's completer on an open connection, for `idem complete --app
 * examples/payments/complete.ts` (the CLI opens the database and calls this).
 *
 * @param context the CLI's connection (the example always uses its default table): a pg.Pool or
 *   PGlite, or with `--database-url mysql://…` the CLI's mysql2 pool
 * @param env the example's settings (PSP_*, IDEM_LEASE_MS, IDEM_RETENTION_MS)
 * @param store the store the server uses when it is not PostgreSQL (REDIS_URL: see redis.ts)
 */
export async function createCompleter(
  context: { client: SqlClient | MySqlDatabase | MySqlPool },
  env: NodeJS.ProcessEnv = process.env,
  store?: IdempotencyStore<Queryable>,
): Promise<Completer<Queryable>> {
  // The CLI hands over a bare mysql2 pool on a mysql:// URL (it has getConnection, a pg.Pool has connect).
  const client = isMySql(context.client) || !('getConnection' in context.client) ? context.client : mysqlDatabase(context.client);
  await migrate(client);
  const psp = new FakePsp(client, { latencyMs: Number(env.PSP_LATENCY_MS ?? 50), failureRate: Number(env.PSP_FAILURE_RATE ?? 0) });
  const { completer } = createPaymentsApp({
    db: client,
    psp,
    leaseMs: env.IDEM_LEASE_MS ? Number(env.IDEM_LEASE_MS) : undefined,
    retentionMs: env.IDEM_RETENTION_MS ? Number(env.IDEM_RETENTION_MS) : undefined,
    completer: true,
    completerGraceMs: Number(env.IDEM_COMPLETER_GRACE_MS ?? 10_000),
    ...(store ? { store } : {}),
  });
  return completer!;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  runCompleterOnce().then(
    (report) => console.log(JSON.stringify(report)),
    (error) => {
      console.error(`idem example: completer failed: ${(error as Error)?.message ?? error}`);
      process.exit(1);
    },
  );
}
