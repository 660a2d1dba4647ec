/**
 * Type tests (tsc only, never run): a SqliteStore's phase `tx` is inferred from its client —
 * better-sqlite3's `Database`, libSQL's `Transaction` — with nothing named by hand.
 */
import Database from 'better-sqlite3';
import { createClient } from '@libsql/client';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { SqliteStore } from '../src/sqlite/index.js';

export async function betterSqlite3Tx() {
  const engine = new IdempotencyEngine({ store: new SqliteStore({ client: new Database('app.db') }) });
  const run = await engine.takeOver({ scope: 's', key: 'k', token: 1 });
  const changes: number | undefined = await run?.phase('charge', async (tx) => tx.prepare('INSERT INTO charges (amount) VALUES (?)').run(1).changes);
  return changes;
}

export async function libsqlTx() {
  const engine = new IdempotencyEngine({ store: new SqliteStore({ client: createClient({ url: 'file:app.db', timeout: 5000 }) }) });
  const run = await engine.takeOver({ scope: 's', key: 'k', token: 1 });
  const rows: number | undefined = await run?.phase('charge', async (tx) => (await tx.execute({ sql: 'SELECT 1', args: [] })).rowsAffected);
  return rows;
}
