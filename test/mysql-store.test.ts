/**
 * What only the MySQL store shows (the store contract and the engine suite run over it through
 * test/helpers/mysql-stores.ts): wait mode refused with its reason, keys compared byte for byte,
 * bodies out of line in `<table>_blobs`, a sweep that keeps the token counter, and the CLI (its
 * operator actions and dashboard refused at once). On the server
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

  it('refuses wait mode with the reason: MySQL has no LISTEN/NOTIFY (protocol.md K45)', async () => {
    const store = await fresh();
    assert.throws(
      () => new IdempotencyEngine({ store, inProgress: { wait: 1000 } }),
      (error: unknown) => {
        assert.ok(error instanceof InvalidOptionError);
        assert.match(error.message, /no LISTEN\/NOTIFY/);
        return true;
      },
    );
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

  it('refuses idem release, forget and dashboard on a mysql:// URL at once, in one line naming the reason, and changes nothing', async () => {
    const store = await fresh();
    const token = claimedToken(await store.claim(claimInput('op-key')));
    const before = await store.inspect('tenant-1', 'op-key');
    for (const args of [
      ['release', 'tenant-1', 'op-key', '--force'],
      ['forget', 'tenant-1', 'op-key'],
      ['dashboard', '--port', '0'],
    ]) {
      const lines: string[] = [];
      const io = { out: (l: string) => void lines.push(l), err: (l: string) => void lines.push(`ERR ${l}`), progressStream: process.stderr };
      const code = await run(['node', 'idem', ...args, '--database-url', db.url, '--table', store.table], io);
      assert.equal(code, 1, `${args[0]}: ${lines.join('\n')}`);
      assert.equal(lines.length, 1, lines.join('\n'));
      assert.match(lines[0]!, new RegExp(`^ERR error: idem ${args[0]} is not available on MySQL: MySqlStore has no .*operator writes`));
    }
    // The key is as it was: same token, still held, no note.
    const now = await store.inspect('tenant-1', 'op-key');
    assert.equal(now?.token, String(token));
    assert.equal(now?.state, 'started');
    assert.equal(now?.lockedUntil?.getTime(), before?.lockedUntil?.getTime());
    await store.dropTables();
  });
});
