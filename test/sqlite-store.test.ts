/**
 * SqliteStore beyond the store contract (protocol.md K51): the options it refuses, WAL turned on
 * by migrate, and a file whose write lock another connection holds past the busy timeout, which
 * is the store being unavailable (StoreTimeoutError, a 503) with nothing written.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { InvalidOptionError, StoreTimeoutError } from '../src/core/errors.js';
import { type SqliteDatabaseLike, SqliteStore } from '../src/sqlite/index.js';
import { claimInput } from './contracts/store.js';
import { scratchFile } from './helpers/sqlite-stores.js';

const NODE_SQLITE: string = 'node:sqlite';
const { DatabaseSync } = (await import(NODE_SQLITE)) as { DatabaseSync: new (file: string) => SqliteDatabaseLike & { close(): void } };

describe('SqliteStore', () => {
  const scratch = scratchFile();
  const db = new DatabaseSync(scratch.file);
  after(() => {
    db.close();
    scratch.remove();
  });

  it('refuses a client that is no SQLite database, a bad table name, busy timeout or poll', () => {
    assert.throws(() => new SqliteStore({ client: {} as never }), InvalidOptionError);
    assert.throws(() => new SqliteStore({ client: db, table: 'keys; DROP TABLE x' }), InvalidOptionError);
    assert.throws(() => new SqliteStore({ client: db, busyTimeoutMs: -1 }), InvalidOptionError);
    assert.throws(() => new SqliteStore({ client: db, waitPoll: { minMs: 0 } }), InvalidOptionError);
  });

  it('turns on WAL and creates its tables once; a second migrate finds them', async () => {
    const store = new SqliteStore({ client: db, table: 'wal_keys' });
    assert.equal(await store.tableMode(), undefined);
    assert.deepEqual(await store.migrate(), { table: 'created', partitionsCreated: [] });
    assert.deepEqual(await store.migrate(), { table: 'exists', partitionsCreated: [] });
    assert.deepEqual({ ...(db.prepare('PRAGMA journal_mode').all()[0] as object) }, { journal_mode: 'wal' });
    assert.equal(await store.tableMode(), 'plain');
  });

  it('answers StoreTimeoutError when another connection holds the write lock past the busy timeout, and writes nothing', async () => {
    const store = new SqliteStore({ client: db, table: 'busy_keys', busyTimeoutMs: 50 });
    await store.migrate();
    const holder = new DatabaseSync(scratch.file);
    try {
      holder.exec('BEGIN IMMEDIATE');
      await assert.rejects(store.claim(claimInput('busy')), (error: Error) => error instanceof StoreTimeoutError && error.retryable === true);
      holder.exec('ROLLBACK');
    } finally {
      holder.close();
    }
    assert.equal(await store.get('tenant-1', 'busy', 60_000), undefined);
    // The lock gone, the same claim goes through.
    assert.equal((await store.claim(claimInput('busy'))).kind, 'claimed');
  });
});
