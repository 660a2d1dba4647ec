/**
 * One app process on a SQLite file, for test/sqlite-processes.test.ts: Hono with idem in front of
 * `POST /v1/charges`, SqliteStore on node:sqlite on `IDEM_SQLITE_FILE`, a short lease (3 s)
 * and wait mode. The handler prints `run <key> <pid>` when it starts; with an `x-hang` header
 * (not part of the fingerprint) it then prints `holding <key>` and never returns (the process
 * is killed holding the claim);
 * otherwise the charge row and idem's finish commit in one transaction of the file. Prints
 * `listening <port>` when it serves.
 */
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { idempotency, type IdempotencyVariables } from '../../src/hono/index.js';
import { SqliteStore, type SqliteDatabaseLike } from '../../src/sqlite/index.js';

const NODE_SQLITE: string = 'node:sqlite';
const { DatabaseSync } = (await import(NODE_SQLITE)) as { DatabaseSync: new (file: string) => SqliteDatabaseLike };
const db = new DatabaseSync(process.env.IDEM_SQLITE_FILE!);
const store = new SqliteStore({ client: db });
await store.migrate();
db.exec('CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY AUTOINCREMENT, amount INTEGER NOT NULL, pid INTEGER NOT NULL)');

const app = new Hono<{ Variables: IdempotencyVariables<SqliteDatabaseLike> }>();
app.post('/v1/charges', idempotency({ store, required: true, leaseMs: 3000, inProgress: { wait: 3000 } }), async (c) => {
  const idem = c.get('idem')!;
  const body = (await c.req.json()) as { amount: number };
  console.log(`run ${c.req.header('idempotency-key')} ${process.pid}`);
  if (c.req.header('x-hang')) {
    console.log(`holding ${c.req.header('idempotency-key')}`);
    await new Promise(() => undefined);
  }
  return idem.respond(async (tx) => {
    const row = tx.prepare('INSERT INTO charges (amount, pid) VALUES (?, ?) RETURNING id').all(body.amount, process.pid)[0] as { id: number };
    return c.json({ charge: row.id, pid: process.pid }, 201);
  });
});

serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, (info) => console.log(`listening ${info.port}`));
