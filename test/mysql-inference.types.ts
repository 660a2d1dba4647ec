/**
 * Type-level tests for idem/mysql (checked by `npm run typecheck`, never run): a phase's `tx` is
 * mysql2's `PoolConnection` on a pool, Drizzle's MySQL transaction on `drizzleMySql(db)` and
 * Kysely's `Transaction<DB>` on `kyselyMySql(db, pool)`,
 * inferred through the store without casts or explicit generics. Each `@ts-expect-error` fails
 * the typecheck when the inferred type widens (to `any` or `unknown`) or is wrong.
 */
import { drizzle } from 'drizzle-orm/mysql2';
import { int, mysqlTable } from 'drizzle-orm/mysql-core';
import type { Pool, PoolConnection } from 'mysql2/promise';
import { IdempotencyEngine } from '../src/engine/engine.js';
import type { Generated, Kysely } from 'kysely';
import { drizzleMySql, kyselyMySql, MySqlStore } from '../src/mysql/index.js';
import type { TxOf } from '../src/store/types.js';

declare const pool: Pool;
const charges = mysqlTable('charges', { id: int('id').primaryKey().autoincrement(), amount: int('amount').notNull() });

export function onMysql2(): void {
  const store = new MySqlStore({ client: pool });
  const tx: TxOf<typeof store> = {} as PoolConnection;
  // @ts-expect-error a PoolConnection, not a string
  const wrong: TxOf<typeof store> = 'conn';
  void new IdempotencyEngine({ store })
    .takeOver({ scope: 's', key: 'k', token: 1 })
    .then((run) => run?.phase('charge', async (t) => (await t.query('INSERT INTO charges (amount) VALUES (?)', [1]))[0]));
  void tx;
  void wrong;
}

export function onDrizzle(): void {
  const store = new MySqlStore({ client: drizzleMySql(drizzle({ client: pool })) });
  void new IdempotencyEngine({ store }).takeOver({ scope: 's', key: 'k', token: 1 }).then((run) =>
    run?.phase('charge', async (t) => {
      await t.insert(charges).values({ amount: 1 });
      // @ts-expect-error Drizzle's transaction has no mysql2 query method
      await t.query('SELECT 1');
    }),
  );
}

declare const kdb: Kysely<{ charges: { id: Generated<number>; amount: number } }>;

export function onKysely(): void {
  const store = new MySqlStore({ client: kyselyMySql(kdb, pool) });
  void new IdempotencyEngine({ store }).takeOver({ scope: 's', key: 'k', token: 1 }).then((run) =>
    run?.phase('charge', async (t) => {
      await t.insertInto('charges').values({ amount: 1 }).execute();
      // @ts-expect-error no such table in the database's schema
      await t.insertInto('refunds').values({ amount: 1 }).execute();
    }),
  );
}
