/**
 * What only the MySQL store shows (the store contract and the engine suite run over it through
 * test/helpers/mysql-stores.ts): wait mode by polling, keys compared byte for byte, bodies out
 * of line in `<table>_blobs`, a sweep that keeps the token counter, the operator note's upgrade,
 * and the CLI (its operator actions included). On the server
 * of MYSQL_URL, in a database of this file's own (dropped after).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import mysql, { type Pool } from 'mysql2/promise';
import { drizzle } from 'drizzle-orm/mysql2';
import { sql } from 'drizzle-orm';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { InvalidOptionError } from '../src/core/errors.js';
import { drizzleMySql, MySqlStore } from '../src/mysql/index.js';
import { StoreTimeoutError } from '../src/store/deadline.js';
import { isTransientFailure } from '../src/engine/failures.js';
import { needs } from './helpers/services.js';
import { openMySqlDatabase } from './helpers/mysql-stores.js';
import { tableName } from './helpers/engines.js';
import { claimedToken, claimInput } from './contracts/store.js';
import { SCOPE } from './contracts/store/shared.js';
import { run } from '../src/cli/program.js';

describe('MySqlStore', { skip: needs('MYSQL_URL') }, () => {
  let db: Awaited<ReturnType<typeof openMySqlDatabase>>;
  let pool: Pool;
  before(async () => {
    db = await openMySqlDatabase();
    pool = db.pool;
  });
  after(async () => {
    await db?.close();
  });
  const fresh = async (options: { inlineMaxBytes?: number } = {}) => {
    const store = new MySqlStore({ client: pool, table: tableName(), ...options });
    await store.migrate();
    return store;
  };

  it('Drizzle: a fenced write past storeTimeoutMs answers StoreTimeoutError and leaves Drizzle’s connection to Drizzle: rolled back and back in its pool, not destroyed', async () => {
    // One connection: what Drizzle's next query gets is the phase's connection, or a new one if idem destroyed it.
    const one = mysql.createPool({ uri: db.url, connectionLimit: 1 });
    const orm = drizzle({ client: one });
    const table = tableName();
    const store = new MySqlStore({ client: drizzleMySql(orm), table, storeTimeoutMs: 300 });
    const holder = await mysql.createConnection(db.url);
    try {
      await store.migrate();
      const token = claimedToken(await store.claim(claimInput('drizzle-timeout')));
      // Another session holds the key's row: idem's fenced write waits on it past the deadline.
      await holder.query('START TRANSACTION');
      await holder.query(`SELECT * FROM \`${table}\` FOR UPDATE`);
      let thread = -1;
      const error = await store
        .commit(
          { scope: SCOPE, key: 'drizzle-timeout', token },
          (value: number) => ({ kind: 'phase', phase: 'charged', result: value, leaseMs: 60_000 }),
          async (tx: { execute(query: unknown): Promise<unknown> }) => {
            const [rows] = (await tx.execute(sql`SELECT CONNECTION_ID() AS id`)) as [Array<{ id: number }>];
            thread = Number(rows[0]!.id);
            return 1;
          },
        )
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      assert.ok(error instanceof StoreTimeoutError, `the deadline's own error (a 503, not a counted failure), got ${String(error)}`);
      assert.ok(isTransientFailure(error));
      // The message (built only past the deadline) names the statement that ran out of time.
      assert.match((error as Error).message, /^idem\/mysql: UPDATE `/);
      await holder.query('ROLLBACK');
      // Drizzle rolls its transaction back and releases the connection: its pool serves the next query on it.
      const [rows] = (await orm.execute(sql`SELECT CONNECTION_ID() AS id`)) as unknown as [Array<{ id: number }>];
      assert.equal(Number(rows[0]!.id), thread, 'the phase’s connection is back in Drizzle’s pool');
      assert.equal((await store.get(SCOPE, 'drizzle-timeout', 86_400_000))?.recoveryPoint, 'start', 'nothing committed');
      await orm.transaction(async (tx) => void (await tx.execute(sql`SELECT 1`)));
      await store.dropTables();
    } finally {
      await holder.end().catch(() => undefined);
      await one.end();
    }
  });

  it('serves wait mode by polling: a waiting duplicate replays the finish, with the poll settings checked (protocol.md K17)', async () => {
    const store = await fresh();
    assert.throws(() => new MySqlStore({ client: pool, waitPoll: { minMs: 0 } }), InvalidOptionError);
    const engine = new IdempotencyEngine({ store, inProgress: { wait: 10_000 } });
    const input = { scope: SCOPE, key: 'waited', fingerprint: new Uint8Array(32).fill(7) };
    const first = await engine.begin(input);
    assert.equal(first.kind, 'execute');
    const waiter = engine.begin(input);
    await new Promise((r) => setTimeout(r, 100));
    const finishedAt = performance.now();
    if (first.kind === 'execute') await first.execution.finish(async () => ({ status: 201, headers: [], body: new TextEncoder().encode('ok') }));
    const second = await waiter;
    assert.equal(second.kind, 'replay');
    // The poll backs off to 500 ms at most: far below the wait's 10 s.
    assert.ok(performance.now() - finishedAt < 2000);
    await store.dropTables();
  });

  it('adds the operator note column to a table made before operator actions', async () => {
    const store = await fresh();
    await pool.query(`ALTER TABLE \`${store.table}\` DROP COLUMN operator_note`);
    assert.deepEqual(await store.migrate(), { table: 'exists', partitionsCreated: [] });
    const token = claimedToken(await store.claim(claimInput('old-table', { leaseMs: 0 })));
    assert.equal((await store.operate({ action: 'release', ref: { scope: SCOPE, key: 'old-table', token }, note: '{"n":1}' })).kind, 'ok');
    assert.equal((await store.get(SCOPE, 'old-table', 60_000))?.operatorNote, '{"n":1}');
    await store.dropTables();
  });

  it('migrates idempotently and reports whether it created the table', async () => {
    const table = tableName();
    const store = new MySqlStore({ client: pool, table });
    assert.deepEqual(await store.migrate(), { table: 'created', partitionsCreated: [] });
    assert.deepEqual(await store.migrate(), { table: 'exists', partitionsCreated: [] });
    await store.dropTables();
  });

  it('compares keys byte for byte: a trailing space or another case is another key', async () => {
    const store = await fresh();
    claimedToken(await store.claim(claimInput('k')));
    claimedToken(await store.claim(claimInput('k ')));
    claimedToken(await store.claim(claimInput('K')));
    assert.equal((await store.claim(claimInput('k'))).kind, 'exists');
    await store.dropTables();
  });

  it('stores a body above inlineMaxBytes out of line, replays it, and a fenced finish leaves no blob', async () => {
    const store = await fresh({ inlineMaxBytes: 16 });
    const body = new Uint8Array(100_000).map((_, i) => i % 251);
    const token = claimedToken(await store.claim(claimInput('big')));
    const stale = claimedToken(await store.claim(claimInput('stale')));
    await store.extendLease({ scope: 'tenant-1', key: 'stale', token: stale + 1000 }, 1000);
    const fenced = await store.commit({ scope: 'tenant-1', key: 'stale', token: stale + 1000 }, () => ({
      kind: 'finish',
      response: { status: 200, headers: [], body },
    }));
    assert.equal(fenced.kind, 'fenced');
    const done = await store.commit({ scope: 'tenant-1', key: 'big', token }, () => ({
      kind: 'finish',
      response: { status: 201, headers: [['content-type', 'application/octet-stream']], body },
    }));
    assert.equal(done.kind, 'ok');
    const [blobs] = await pool.query(`SELECT CAST(\`key\` AS CHAR) AS k, OCTET_LENGTH(body) AS n FROM \`${store.table}_blobs\``);
    assert.deepEqual(
      (blobs as Array<{ k: string; n: number }>).map((r) => [r.k, Number(r.n)]),
      [['big', 100_000]],
    );
    const again = await store.claim(claimInput('big'));
    assert.equal(again.kind, 'exists');
    assert.deepEqual((again as { record: { response?: { body: Uint8Array } } }).record.response?.body, body);
    await store.dropTables();
  });

  it('keeps the highest token row when the sweep trims the token table, so tokens keep growing', async () => {
    const store = await fresh();
    const first = claimedToken(await store.claim(claimInput('a')));
    claimedToken(await store.claim(claimInput('b')));
    await store.sweep({ retentionMs: 60_000 });
    const [rows] = await pool.query(`SELECT COUNT(*) AS n FROM \`${store.table}_tokens\``);
    assert.equal(Number((rows as Array<{ n: number }>)[0]!.n), 1);
    assert.ok(claimedToken(await store.claim(claimInput('c'))) > first + 1);
    await store.dropTables();
  });

  it('runs the CLI on a mysql:// URL: migrate, inspect, stats, sweep (dry run and for real)', async () => {
    const table = tableName();
    const lines: string[] = [];
    const io = { out: (l: string) => void lines.push(l), err: (l: string) => void lines.push(`ERR ${l}`), progressStream: process.stderr };
    const cli = async (...args: string[]) => {
      lines.length = 0;
      const code = await run(['node', 'idem', ...args, '--database-url', db.url, '--table', table, '--json'], io);
      assert.equal(code, 0, lines.join('\n'));
      return JSON.parse(lines.at(-1)!) as Record<string, unknown>;
    };
    assert.equal((await cli('migrate')).result, 'created');
    const store = new MySqlStore({ client: pool, table });
    const token = claimedToken(await store.claim(claimInput('cli-key')));
    await store.commit({ scope: 'tenant-1', key: 'cli-key', token }, () => ({
      kind: 'finish',
      response: { status: 201, headers: [['content-type', 'text/plain']], body: new TextEncoder().encode('hello') },
    }));
    const inspected = await cli('inspect', 'tenant-1', 'cli-key');
    assert.equal(inspected.state, 'done');
    assert.equal(inspected.token, String(token));
    assert.deepEqual(inspected.response, { status: 201, headers: [['content-type', 'text/plain']], bytes: 5, storage: 'inline', keyId: null });
    assert.equal((await cli('stats')).done, 1);
    await pool.query(`UPDATE \`${table}\` SET created_at = created_at - INTERVAL 2 DAY`);
    assert.equal((await cli('sweep', '--dry-run')).sweepable, 1);
    assert.equal((await cli('sweep', '--no-progress')).deleted, 1);
    assert.equal((await cli('stats')).total, 0);
    await store.dropTables();
  });

  it('runs idem release and forget on a mysql:// URL, fenced and recorded on the row (protocol.md K40-K42)', async () => {
    const store = await fresh();
    const lines: string[] = [];
    const io = { out: (l: string) => void lines.push(l), err: (l: string) => void lines.push(`ERR ${l}`), progressStream: process.stderr };
    const cli = async (...args: string[]) => {
      lines.length = 0;
      return run(['node', 'idem', ...args, '--database-url', db.url, '--table', store.table, '--by', 'alice'], io);
    };
    const token = claimedToken(await store.claim(claimInput('op-key')));
    // A live lease is refused without --force, and nothing changes.
    assert.equal(await cli('release', 'tenant-1', 'op-key'), 1);
    assert.match(lines.join('\n'), /not released: a worker holds the lease/);
    assert.equal((await store.inspect('tenant-1', 'op-key'))?.token, String(token));
    assert.equal(await cli('release', 'tenant-1', 'op-key', '--force', '--reason', 'INC-1'), 0, lines.join('\n'));
    const released = await store.inspect('tenant-1', 'op-key');
    assert.ok(Number(released?.token) > token);
    assert.equal(released?.leaseExpired, true);
    assert.match(released?.operatorNote ?? '', /"by":"alice".*"reason":"INC-1"/);
    assert.equal((await store.extendLease({ scope: 'tenant-1', key: 'op-key', token }, 60_000)).kind, 'fenced', 'the holder is fenced');
    // Forget: refused on a started key, then a finished key runs again.
    assert.equal(await cli('forget', 'tenant-1', 'op-key'), 1);
    const taken = await store.takeOver({ scope: 'tenant-1', key: 'op-key', token: Number(released!.token) }, 60_000);
    assert.equal(taken.kind, 'taken');
    const held = (taken as { token: number }).token;
    await store.commit({ scope: 'tenant-1', key: 'op-key', token: held }, () => ({
      kind: 'finish',
      response: { status: 500, headers: [], body: new TextEncoder().encode('x'.repeat(100_000)) },
    }));
    assert.equal(await cli('forget', 'tenant-1', 'op-key', '--token', String(held)), 0, lines.join('\n'));
    const forgotten = await store.get(SCOPE, 'op-key', 60_000);
    assert.equal(forgotten?.state, 'started');
    assert.equal(forgotten?.recoveryPoint, 'start');
    assert.equal(forgotten?.response, undefined);
    const [blobs] = (await pool.query(`SELECT COUNT(*) AS n FROM \`${store.table}_blobs\``)) as unknown as [Array<{ n: number }>];
    assert.equal(Number(blobs[0]!.n), 0, "the forgotten response's blob is deleted");
    await store.dropTables();
  });
});
