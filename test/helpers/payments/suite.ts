/**
 * The frame of every payments end-to-end test file: each file runs its scenarios on every
 * backend (embedded PGlite always, PostgreSQL when DATABASE_URL is set), concurrently, with one
 * long-lived shared server per backend and every server it started killed at the end.
 */
import { after, before, describe, test } from 'node:test';
import { citusBackend, localRows, pgliteBackend, postgresBackend, type Backend, type Database, type Rows } from './databases.js';
import { startServer, type Server } from './servers.js';

/** A scenario's ceiling: generous, for a busy two-core machine. */
export const TEST_TIMEOUT_MS = 120_000;
/** Options of every scenario test. */
export const T = { timeout: TEST_TIMEOUT_MS };

/** What a file's scenarios get for one backend. */
export interface PaymentsEnv {
  backend: Backend;
  /** Starts a server on `db` (killed after the suite). */
  start(db: Database, env?: Record<string, string>): Promise<Server>;
  /**
   * One long-lived server for the scenarios that need no special environment. Its PSP takes
   * 300 ms, so that concurrent duplicates find the first request in progress.
   */
  shared(): Promise<Server>;
  /** The shared server's database. */
  sharedDb(): Database;
  /** The local rows of a customer by direct SQL, where the database is shared with the running servers (PostgreSQL); else undefined. */
  liveRows(customer: string): Promise<Rows | undefined>;
}

/**
 * Registers `title` with `scenarios` on every backend. With `warmShared` (default true) the
 * shared server starts in `before`, while other servers start; a file that never uses it
 * passes false.
 */
export function paymentsSuite(title: string, scenarios: (env: PaymentsEnv) => void, options: { warmShared?: boolean } = {}): void {
  const { warmShared = true } = options;
  const backends: Backend[] = [pgliteBackend()];
  if (process.env.DATABASE_URL) backends.push(postgresBackend(process.env.DATABASE_URL));
  if (process.env.CITUS_URL) backends.push(citusBackend(process.env.CITUS_URL));

  describe(title, { concurrency: true }, () => {
    if (!process.env.DATABASE_URL) {
      test('postgres backend', { skip: 'DATABASE_URL is not set: PostgreSQL backend not run' }, () => undefined);
    }
    if (!process.env.CITUS_URL) test('citus backend', { skip: 'CITUS_URL is not set: Citus backend not run' }, () => undefined);
    for (const backend of backends) {
      describe(backend.name, { concurrency: true }, () => {
        /** Every server this suite started, killed in `after`. */
        const servers = new Set<Server>();
        let sharedDb: Database;
        let sharedServer: Promise<Server> | undefined;
        const start = async (db: Database, env: Record<string, string> = {}) => {
          const server = await startServer(db, env);
          servers.add(server);
          return server;
        };
        const shared = () => (sharedServer ??= start(sharedDb, { PSP_LATENCY_MS: '300' }));

        before(
          async () => {
            await backend.setup();
            sharedDb = backend.database();
            if (warmShared) void shared().catch(() => undefined); // warm up while other servers start
          },
          { timeout: 90_000 },
        );

        after(async () => {
          // A shared server still starting joins `servers` once up: wait for it, so it is killed too.
          await sharedServer?.catch(() => undefined);
          for (const server of servers) {
            server.child.kill('SIGKILL');
            await server.exited;
          }
          await backend.teardown();
        });

        scenarios({
          backend,
          start,
          shared,
          sharedDb: () => sharedDb,
          liveRows: async (customer) => (backend.multiProcess ? (await sharedDb.inspect({ rows: localRows(customer) })).rows : undefined),
        });
      });
    }
  });
}
