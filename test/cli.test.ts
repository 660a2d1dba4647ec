/**
 * The `idem` CLI run for real, as a child process (`node --import tsx src/cli/main.ts`), on
 * embedded PGlite (a temporary data directory) and, when DATABASE_URL is set, on PostgreSQL
 * (a unique table). The test seeds rows with its own connection between CLI runs (PGlite: only
 * while no CLI process holds the directory).
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { fullMatrixOnly } from './helpers/services.js';
import { tableName } from './helpers/engines.js';
import type { Queryable } from '../src/postgres/client.js';
import { HttpIdempotency } from '../src/http/index.js';
import { PostgresStore } from '../src/postgres/index.js';
import { idem, ROOT, type Result } from './helpers/cli.js';

/** The machine may be busy: a PGlite data directory's first start alone can take half a minute. */
const TIMEOUT_MS = 900_000;

/** One line on stderr starting with `error:`, a non-zero exit, nothing on stdout. */
function assertOneLineError(r: Result, pattern: RegExp) {
  assert.notEqual(r.code, 0, `non-zero exit; stdout ${r.stdout}`);
  const first = r.stderr.split('\n')[0]!;
  assert.match(first, /^error: /, `stderr starts with "error:": ${r.stderr}`);
  assert.match(first, pattern, `stderr: ${r.stderr}`);
  assert.equal(r.stdout, '', 'nothing on stdout');
}

interface Backend {
  name: string;
  /** The connection and table arguments for every command. */
  args: string[];
  table: string;
  /** Runs `fn` on a connection of the test's own (PGlite: while no CLI holds the directory). */
  sql<T>(fn: (db: Queryable) => Promise<T>): Promise<T>;
  cleanup(): Promise<void>;
}

function pgliteBackend(): Backend {
  const dir = mkdtempSync(join(tmpdir(), 'idem-cli-'));
  const table = 'idempotency_keys';
  return {
    name: 'pglite',
    args: ['--data-dir', dir],
    table,
    async sql(fn) {
      const db = await PGlite.create(dir);
      try {
        return await fn(db as unknown as Queryable);
      } finally {
        await db.close();
      }
    },
    cleanup: async () => rmSync(dir, { recursive: true, force: true }),
  };
}

function postgresBackend(url: string): Backend {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  const table = tableName('idem_cli');
  return {
    name: 'postgres',
    args: ['--database-url', url, '--table', table],
    table,
    sql: (fn) => fn(pool as unknown as Queryable),
    async cleanup() {
      await pool.query(`DROP TABLE IF EXISTS "${table}_blobs"`);
      await pool.query(`DROP TABLE IF EXISTS "${table}"`);
      await pool.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
      await pool.end();
    },
  };
}

describe('idem CLI basics', { timeout: TIMEOUT_MS }, () => {
  it('prints help listing every command, exit 0', async () => {
    const r = await idem(['--help']);
    assert.equal(r.code, 0, r.stderr);
    for (const command of ['migrate', 'sweep', 'inspect', 'stats', 'complete', 'partitions']) assert.match(r.stdout, new RegExp(`\\n  ${command}`), command);
    const sweep = await idem(['sweep', '--help']);
    assert.equal(sweep.code, 0);
    for (const option of ['--dry-run', '--batch-size', '--max-duration', '--retention', '--database-url', '--table']) {
      assert.ok(sweep.stdout.includes(option), `sweep --help lists ${option}`);
    }
    assert.match(sweep.stdout, /e\.g\. 30s, 10m/, 'the unit of --max-duration is said');
  });

  it('rejects bad input with one line and a non-zero exit, touching nothing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'idem-cli-bad-'));
    try {
      const data = ['--data-dir', dir];
      assertOneLineError(await idem(['sweep', ...data, '--batch-size', '0']), /--batch-size must be a whole number >= 1/);
      assertOneLineError(await idem(['sweep', ...data, '--max-duration', '30']), /--max-duration takes a duration with a unit/);
      assertOneLineError(await idem(['sweep', ...data, '--retention', 'soon']), /--retention takes a duration with a unit/);
      assertOneLineError(await idem(['stats', '--database-url', 'not a url']), /--database-url is not a URL/);
      assertOneLineError(await idem(['stats', '--database-url', 'mongodb://localhost/x']), /must start with postgres:\/\//);
      assertOneLineError(
        await idem(['stats', '--database-url', 'postgres://127.0.0.1:1/none']),
        /cannot connect to postgres:\/\/127\.0\.0\.1:1\/none: .*ECONNREFUSED/,
      );
      assertOneLineError(await idem(['stats', ...data, '--table', 'a;b']), /--table: Invalid table name/);
      assertOneLineError(await idem(['frobnicate']), /unknown command 'frobnicate'/);
      assertOneLineError(await idem(['inspect', ...data, 'only-scope']), /missing required argument 'key'/);
      // A live process holds the PGlite directory: refused, not opened twice.
      writeFileSync(join(dir, 'idem-example.pid'), String(process.pid));
      assertOneLineError(await idem(['migrate', ...data]), /is in use by process \d+/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reads DATABASE_URL from the environment', async () => {
    assertOneLineError(await idem(['stats'], { DATABASE_URL: 'postgres://127.0.0.1:1/env' }), /cannot connect to postgres:\/\/127\.0\.0\.1:1\/env/);
  });
});

const backends: Array<() => Backend> = [pgliteBackend];
if (process.env.DATABASE_URL) backends.push(() => postgresBackend(process.env.DATABASE_URL!));

for (const make of backends) {
  const backend = make();
  // A child process per command, each opening PGlite anew: on PGlite in the full matrix only (npm run test:all).
  describe(`idem CLI on ${backend.name}`, { timeout: TIMEOUT_MS, skip: backend.name === 'pglite' && fullMatrixOnly() }, () => {
    const { args, table } = backend;
    after(() => backend.cleanup());

    it('migrate is idempotent and says what it did; other commands before it name the fix', async () => {
      assertOneLineError(await idem(['stats', ...args]), new RegExp(`table ${table} does not exist in .*: run \`idem migrate\` first`));
      const first = await idem(['migrate', ...args]);
      assert.equal(first.code, 0, first.stderr);
      assert.match(first.stdout, new RegExp(`^Created plain table ${table} in `));
      const second = await idem(['migrate', ...args]);
      assert.equal(second.code, 0, second.stderr);
      assert.match(second.stdout, new RegExp(`^Table ${table} \\(plain\\) in .* is up to date\\.`));
    });

    it('sweep removes exactly the rows past retention: dry run first, then a progress bar and a summary', async () => {
      await backend.sql(async (db) => {
        await db.query(
          `INSERT INTO "${table}" (scope, key, fingerprint, state, created_at)
           SELECT 's', 'old-' || i, sha256(i::text::bytea), 'done', now() - interval '25 hours' - i * interval '1 second'
           FROM generate_series(1, 30) AS i`,
        );
        await db.query(
          `INSERT INTO "${table}" (scope, key, fingerprint, created_at)
           SELECT 's', 'live-' || i, sha256(i::text::bytea), now() - interval '1 hour' FROM generate_series(1, 5) AS i`,
        );
        // Past retention but its worker is alive: kept.
        await db.query(
          `INSERT INTO "${table}" (scope, key, fingerprint, created_at, locked_until)
           VALUES ('s', 'leased', sha256('x'::bytea), now() - interval '30 hours', now() + interval '1 hour')`,
        );
      });
      const dry = await idem(['sweep', ...args, '--dry-run']);
      assert.equal(dry.code, 0, dry.stderr);
      assert.match(dry.stdout, /Dry run: 30 rows would be deleted .* \(31 created at or before .*; 1 kept: lease still valid\)/);
      const stats = JSON.parse((await idem(['stats', ...args, '--json'])).stdout);
      assert.deepEqual({ total: stats.total, expired: stats.expiredUnswept }, { total: 36, expired: 30 }, 'the dry run deleted nothing');

      const swept = await idem(['sweep', ...args, '--batch-size', '7', '--progress']);
      assert.equal(swept.code, 0, swept.stderr);
      assert.match(swept.stdout, new RegExp(`^Deleted 30 rows past retention from ${table} in 5 batch\\(es\\)`), swept.stdout);
      assert.match(swept.stdout, /1 kept: lease still valid or locked/);
      assert.match(swept.stderr, /sweep \[[█░]+\] \d+% \| \d+\/31 rows \| deleted \d+/, `a progress bar on stderr: ${swept.stderr}`);

      const left = await backend.sql(async (db) => (await db.query(`SELECT key FROM "${table}" ORDER BY key`)).rows.map((r) => r.key));
      assert.deepEqual(left, ['leased', 'live-1', 'live-2', 'live-3', 'live-4', 'live-5']);
      const again = JSON.parse((await idem(['sweep', ...args, '--json'])).stdout);
      assert.equal(again.deleted, 0, 'nothing left to sweep');
    });

    it('sweep --max-duration 0s starts no batch and says how to continue', async () => {
      await backend.sql((db) =>
        db.query(`INSERT INTO "${table}" (scope, key, fingerprint, created_at) VALUES ('s', 'late', sha256('l'::bytea), now() - interval '2 days')`),
      );
      const r = await idem(['sweep', ...args, '--max-duration', '0s', '--no-progress']);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /Deleted 0 rows/);
      assert.match(r.stdout, /Stopped by --max-duration; run again to continue\./);
      assert.match((await idem(['sweep', ...args, '--retention', '1d'])).stdout, /^Deleted 1 rows/);
    });

    it('inspect shows state, recovery point, lease, lock_version and the response summary', async () => {
      await backend.sql((db) =>
        db.query(
          `INSERT INTO "${table}" (scope, key, fingerprint, state, recovery_point, phase_results, response_status, response_headers, response_body, lock_version, finished_at)
           VALUES ('tenant-a', 'order-1', sha256('o'::bytea), 'done', 'finished', '{"charge_created": {"id": 1}}', 201,
             '[["content-type", "application/json"]]', convert_to('{"id":1}', 'UTF8'), 4242, now())`,
        ),
      );
      const r = await idem(['inspect', ...args, 'tenant-a', 'order-1']);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /^scope: +tenant-a$/m);
      assert.match(r.stdout, /^state: +done$/m);
      assert.match(r.stdout, /^recovery point: +finished$/m);
      assert.match(r.stdout, /^phases: +charge_created$/m);
      assert.match(r.stdout, /^lease: +none$/m);
      assert.match(r.stdout, /^lock_version: +4242$/m);
      assert.match(r.stdout, /^response: +201, 8 bytes inline, headers: content-type$/m);
      const json = JSON.parse((await idem(['inspect', ...args, 'tenant-a', 'order-1', '--json'])).stdout);
      assert.equal(json.token, '4242');
      assertOneLineError(await idem(['inspect', ...args, 'tenant-a', 'nope']), /no key "nope" in scope "tenant-a"/);
    });

    it('stats counts rows by state, the oldest, expired-but-unswept and abandoned keys', async () => {
      const r = await idem(['stats', ...args]);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /rows: +7 \(started 6, done 1\)/);
      assert.match(r.stdout, /past retention, unswept: +0/);
      assert.match(r.stdout, /in progress, lease expired: +5/);
      assert.match(r.stdout, /live leases: +1/);
      assert.match(r.stdout, /oldest row: +\d{4}-\d\d-\d\dT/);
    });

    it('complete --app drives an abandoned key to completion from its stored request; bad --app is one line', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'idem-cli-app-'));
      const src = (path: string) => JSON.stringify(pathToFileURL(join(ROOT, path)).href);
      // The app's completer: the same route the server would run, reading the stored request.
      const app = join(dir, 'completer.mts'); // .mts: an ES module wherever it lives
      writeFileSync(
        app,
        `import { HttpIdempotency, Completer } from ${src('src/http/index.ts')};
         import { PostgresStore } from ${src('src/postgres/index.ts')};
         export function createCompleter({ client, table }) {
           const http = new HttpIdempotency({ store: new PostgresStore({ client, table }), heartbeatMs: 0, storeRequests: true });
           return new Completer({ http, run: async (req) => new Response(JSON.stringify({ done: (await req.json()).n }), { status: 201 }) });
         }`,
      );
      writeFileSync(join(dir, 'empty.mts'), 'export const nothing = 1;');
      try {
        const scope = await backend.sql(async (db) => {
          const http = new HttpIdempotency({ store: new PostgresStore({ client: db as never, table }), leaseMs: 100, heartbeatMs: 0, storeRequests: true });
          const prepared = await http.prepare({
            method: 'POST',
            url: 'http://x.test/v1/things',
            headers: new Headers({ 'content-type': 'application/json', 'idempotency-key': 'cli-abandoned' }),
            body: new TextEncoder().encode('{"n":7}'),
          });
          assert.equal(prepared.kind, 'execute', 'the key is claimed (the worker then "crashes")');
          return (prepared as { context: { scope: string } }).context.scope;
        });
        await new Promise((resolve) => setTimeout(resolve, 300)); // the 100 ms lease runs out
        const r = await idem(['complete', ...args, '--app', app, '--json']);
        assert.equal(r.code, 0, r.stderr);
        const report = JSON.parse(r.stdout);
        assert.equal(report.completed, 1, `one key completed: ${r.stdout}`);
        const done = await backend.sql((db) => new PostgresStore({ client: db as never, table }).get(scope, 'cli-abandoned', 86_400_000));
        assert.equal(done?.state, 'done', 'the key is finished');
        assert.equal(new TextDecoder().decode(done?.response?.body), '{"done":7}', 'the route ran on the stored request body');
        assertOneLineError(await idem(['complete', ...args, '--app', join(dir, 'missing.mts')]), /--app: cannot load/);
        assertOneLineError(await idem(['complete', ...args, '--app', join(dir, 'empty.mts')]), /does not export a function createCompleter/);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('partitioned: migrate --partitioned, partitions ahead, sweep drops a whole expired day', async () => {
      const ptable = backend.name === 'pglite' ? 'keys_by_day' : `${table}_p`;
      const pargs = [...args.filter((_, i) => args[i] !== '--table' && args[i - 1] !== '--table'), '--table', ptable];
      try {
        const m = await idem(['migrate', ...pargs, '--partitioned', '--days-ahead', '2']);
        assert.equal(m.code, 0, m.stderr);
        assert.match(m.stdout, new RegExp(`^Created partitioned table ${ptable} in `));
        assert.match(m.stdout, /Created partitions: (\w+_p\d{8}(, )?){4}\./, 'yesterday, today and two days ahead');
        const parts = await idem(['partitions', ...pargs, '--days-ahead', '3']);
        assert.equal(parts.code, 0, parts.stderr);
        assert.match(parts.stdout, /^Created partitions: \w+_p\d{8}\./, 'one more day ahead');
        await backend.sql((db) =>
          db.query(
            `INSERT INTO "${ptable}" (scope, key, fingerprint, created_at)
             SELECT 's', 'y' || i, sha256(i::text::bytea), date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '1 hour'
             FROM generate_series(1, 12) AS i`,
          ),
        );
        const swept = await idem(['sweep', ...pargs, '--retention', '1s']);
        assert.equal(swept.code, 0, swept.stderr);
        assert.match(swept.stdout, /^Dropped 1 partition\(s\) of \w+ holding 12 rows in [\d.]+ s \(\w+_p\d{8}\)\./);
        assertOneLineError(await idem(['partitions', ...args]), /is not partitioned/);
      } finally {
        await backend.sql(async (db) => {
          await db.query(`DROP TABLE IF EXISTS "${ptable}"`);
          await db.query(`DROP SEQUENCE IF EXISTS "${ptable}_lock_version_seq"`);
        });
      }
    });
  });
}
