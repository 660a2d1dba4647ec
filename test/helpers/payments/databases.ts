/**
 * The databases the example payments server runs on in its end-to-end tests: embedded PGlite (a
 * fresh directory per scenario, copied from a template initialised once) and real PostgreSQL (a
 * fresh database for the test file), with direct reads that bypass the API.
 */
import { spawn } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { CHILD_READY_TIMEOUT_MS, ROOT } from '../process.js';
import { rand } from './api.js';

/** Rows of a query, whichever driver ran it. */
export type Rows = Array<Record<string, unknown>>;
/** Named statements run together by {@link Database.inspect}. */
export type Statements = Record<string, { sql: string; params?: unknown[] }>;
export type Results<S extends Statements> = { [K in keyof S]: Rows };

/** One database that servers are pointed at. */
export interface Database {
  /** DATABASE_URL or IDEM_DATA_DIR for the server. */
  env: Record<string, string>;
  /**
   * Runs statements directly on the database, bypassing the API. On PGlite no server may have
   * the directory open (one process at a time): call it after a crash or a stop.
   */
  inspect<S extends Statements>(statements: S): Promise<Results<S>>;
}

export interface Backend {
  name: 'pglite' | 'postgres' | 'citus';
  /** True when two servers (or a server and the test) can use one database at once. */
  multiProcess: boolean;
  setup(): Promise<void>;
  teardown(): Promise<void>;
  /** A database for a new scenario: PGlite a fresh directory, PostgreSQL this file's database. */
  database(): Database;
}

/**
 * Opens a PGlite directory in a short-lived child process, runs the statements and closes it.
 * Out of process because PGlite's start-up (and initdb on an empty directory) keeps a thread
 * busy for seconds, which would stall the timing-sensitive tests running concurrently here.
 */
const PGLITE_INSPECTOR = `
import { PGlite } from '@electric-sql/pglite';
const statements = JSON.parse(process.env.INSPECT_STATEMENTS);
const db = await PGlite.create(process.env.INSPECT_DIR);
const out = {};
try {
  for (const [name, { sql, params }] of Object.entries(statements)) out[name] = (await db.query(sql, params ?? [])).rows;
} finally {
  await db.close();
}
process.stdout.write(JSON.stringify(out));
`;

export function pgliteInspect<S extends Statements>(dir: string, statements: S): Promise<Results<S>> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', PGLITE_INSPECTOR], {
      cwd: ROOT,
      env: { ...process.env, INSPECT_DIR: dir, INSPECT_STATEMENTS: JSON.stringify(statements) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    // A ceiling on a wedged inspector; it normally exits within seconds.
    const timer = setTimeout(() => child.kill('SIGKILL'), CHILD_READY_TIMEOUT_MS);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code !== 0) return reject(new Error(`PGlite inspector failed on ${dir} (exit ${code}):\n${stderr}`));
      try {
        resolve(JSON.parse(stdout) as Results<S>);
      } catch (error) {
        reject(error);
      }
    });
  });
}

export function pgliteBackend(): Backend {
  let root = '';
  let template = '';
  let n = 0;
  return {
    name: 'pglite',
    multiProcess: false,
    async setup() {
      root = mkdtempSync(join(tmpdir(), 'idem-payments-'));
      // initdb is the slow part of a fresh PGlite (seconds): do it once and copy the directory.
      template = join(root, 'template');
      await pgliteInspect(template, {});
    },
    async teardown() {
      if (root) rmSync(root, { recursive: true, force: true });
    },
    database() {
      const dir = join(root, `db${n++}`);
      cpSync(template, dir, { recursive: true });
      return { env: { IDEM_DATA_DIR: dir }, inspect: (statements) => pgliteInspect(dir, statements) };
    },
  };
}

/** Runs `statements` on a connection of its own to `url`, in order; the last one's rows. */
async function runOn(url: string, ...statements: Array<[string, unknown[]?]>): Promise<Rows> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    let rows: Rows = [];
    for (const [sql, params] of statements) rows = (await client.query(sql, params)).rows as Rows;
    return rows;
  } finally {
    await client.end();
  }
}

export function postgresBackend(adminUrl: string): Backend {
  return sqlBackend('postgres', adminUrl);
}

/**
 * A Citus cluster through its coordinator at `coordinatorUrl` (CITUS_URL): a fresh database
 * for the test file with the citus extension on every node and the same workers, and servers
 * started with IDEM_DISTRIBUTED=citus (tables distributed by tenant, co-located).
 */
export function citusBackend(coordinatorUrl: string): Backend {
  return sqlBackend('citus', coordinatorUrl);
}

function sqlBackend(kind: 'postgres' | 'citus', adminUrl: string): Backend {
  const name = `idem_payments_${rand()}`;
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  let pool: pg.Pool | undefined;
  // Citus: CREATE and DROP DATABASE reach the workers too.
  const propagate: Array<[string]> = kind === 'citus' ? [['SET citus.enable_create_database_propagation = on']] : [];
  return {
    name: kind,
    multiProcess: true,
    async setup() {
      await runOn(adminUrl, ...propagate, [`CREATE DATABASE "${name}"`]);
      if (kind === 'citus') {
        // The new database's own Citus metadata: the extension on every node, the same workers.
        const nodes = await runOn(adminUrl, [`SELECT nodename, nodeport FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0 ORDER BY nodeport`]);
        for (const node of nodes) {
          const worker = new URL(url);
          worker.hostname = String(node.nodename);
          worker.port = String(node.nodeport);
          await runOn(worker.toString(), ['CREATE EXTENSION IF NOT EXISTS citus']);
        }
        const coordinator = new URL(adminUrl);
        await runOn(
          url.toString(),
          ['CREATE EXTENSION IF NOT EXISTS citus'],
          [`SELECT citus_set_coordinator_host($1, $2)`, [coordinator.hostname, Number(coordinator.port || 5432)]],
          ...nodes.map((node): [string, unknown[]] => [`SELECT citus_add_node($1, $2)`, [node.nodename, node.nodeport]]),
        );
      }
      pool = new pg.Pool({ connectionString: url.toString(), max: 4 });
      // pg-pool's end() resolves once it asked its idle clients to close, not once they have: the
      // DROP … WITH (FORCE) of teardown may then terminate one still closing, which the pool
      // re-emits as 'error' (an uncaught exception with no listener). Nothing is lost by then.
      pool.on('error', () => undefined);
    },
    async teardown() {
      await pool?.end();
      await runOn(adminUrl, ...propagate, [`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`]);
    },
    database() {
      return {
        env: { DATABASE_URL: url.toString(), ...(kind === 'citus' ? { IDEM_DISTRIBUTED: 'citus' } : {}) },
        async inspect<S extends Statements>(statements: S) {
          const out: Record<string, Rows> = {};
          for (const [name, { sql, params }] of Object.entries(statements)) out[name] = (await pool!.query(sql, params)).rows as Rows;
          return out as Results<S>;
        },
      };
    },
  };
}

/** The local ledger rows (`charges`) of one customer, oldest first. */
export function localRows(customer: string) {
  return {
    sql: `SELECT id, tenant, idempotency_key, amount::float8 AS amount, status, psp_charge_id
          FROM charges WHERE customer = $1 ORDER BY created_at, id`,
    params: [customer],
  };
}
