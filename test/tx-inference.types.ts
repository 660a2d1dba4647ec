/**
 * Type-level tests (checked by `npm run typecheck`, never run): a phase's `tx` is the store's
 * transaction type, inferred from the store through the engine, the HTTP core, the adapters and
 * the consumer without casts or explicit generics (issue 14). Each `@ts-expect-error` fails the
 * typecheck when the inferred type widens (to `any` or `unknown`) or is wrong.
 */
import type { Hono } from 'hono';
import { type IdempotencyVariables, idempotency as hono } from '../src/hono/index.js';
import { idempotency as express } from '../src/express/index.js';
import { IdempotentConsumer } from '../src/consumer/index.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { Queryable, SqlClient, SqlDriver } from '../src/postgres/client.js';
import type { TxOf } from '../src/store/types.js';

/** A client's own transaction object, unlike a Queryable. */
interface OrmTx {
  insert(table: 'charges'): { values(row: { amount: number }): Promise<void> };
}
declare const driver: SqlDriver<OrmTx>;
declare const pool: SqlClient;

export function inferred(app: Hono<{ Variables: IdempotencyVariables<OrmTx> }>): void {
  const store = new PostgresStore({ client: driver });
  const sameTx: OrmTx = null as unknown as TxOf<typeof store>;
  void sameTx;

  // Hono: the middleware's variables carry the store's Tx.
  app.post('/v1/charges', hono({ store }), async (c) => {
    const idem = c.get('idem')!;
    await idem.phase('charge', (tx) => tx.insert('charges').values({ amount: 1 }));
    // @ts-expect-error tx is OrmTx, not any: it has no `query`
    await idem.phase('raw', (tx) => tx.query('SELECT 1'));
    return c.text('ok');
  });

  // Express: idem.context(res) gives the store's Tx.
  const mw = express({ store });
  const ctx = mw.context({ locals: {} })!;
  void ctx.respond(async (tx) => {
    await tx.insert('charges').values({ amount: 2 });
    // @ts-expect-error the row's shape is checked
    await tx.insert('charges').values({ amount: 'two' });
    return new Response('ok');
  });

  // Engine and consumer.
  const engine = new IdempotencyEngine({ store });
  void engine.takeOver({ scope: 's', key: 'k', token: 1 }).then((run) => run?.phase('p', (tx) => tx.insert('charges').values({ amount: 3 })));
  const consumer = new IdempotentConsumer({ store, scope: 'orders' });
  void consumer.consume({ id: 'm', body: new Uint8Array() } as never, async (m) => m.phase('p', (tx) => tx.insert('charges').values({ amount: 4 })));
}

export function pgStaysQueryable(): void {
  const store = new PostgresStore({ client: pool });
  const core = express({ store });
  void core.context({ locals: {} })?.phase('p', (tx) => tx.query('SELECT 1'));
  // @ts-expect-error tx is Queryable on a pool, not any
  void core.context({ locals: {} })?.phase('p', (tx) => tx.insert('charges'));
  const q: Queryable = null as unknown as TxOf<typeof store>;
  void q;
  // Explicit generics keep working.
  const explicit = express<Queryable>({ store });
  void explicit;
  // @ts-expect-error a pg.Pool cannot give another transaction type
  new PostgresStore<OrmTx>({ client: pool });
}

/** postgres.js: `tx` is postgres.js's TransactionSql, inferred from the client. */
export async function postgresJsTx(): Promise<void> {
  const { default: postgres } = await import('postgres');
  const { postgresjs } = await import('../src/postgresjs/index.js');
  const sql = postgres('postgres://localhost/none');
  const store = new PostgresStore({ client: postgresjs(sql) });
  const mw = express({ store });
  await mw.context({ locals: {} })?.phase('charge', async (tx) => {
    const rows = await tx`INSERT INTO charges (amount) VALUES (${1}) RETURNING id`;
    const savepoint: (cb: (s: typeof tx) => Promise<number>) => Promise<number> = tx.savepoint;
    void savepoint;
    // @ts-expect-error tx is postgres.js's TransactionSql, not a Queryable
    await tx.query('SELECT 1');
    return rows.count;
  });
}
