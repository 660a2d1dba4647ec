/**
 * Type-level tests (checked by `npm run typecheck`, never run): on `kysely(db)` a phase's `tx`
 * is Kysely's `Transaction<DB>`, on `prisma(client)` Prisma's interactive transaction client
 * (of the generated test schema), inferred from the store through the engine and the HTTP
 * adapters without casts or explicit generics (issue 14). Each `@ts-expect-error` fails the
 * typecheck when the inferred type widens (to `any` or `unknown`) or is wrong.
 */
import type { Hono } from 'hono';
import type { Generated, Kysely, Transaction } from 'kysely';
import { type IdempotencyVariables, idempotency as hono } from '../src/hono/index.js';
import { idempotency as express } from '../src/express/index.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { PostgresStore } from '../src/postgres/index.js';
import { kysely } from '../src/kysely/index.js';
import { prisma } from '../src/prisma/index.js';
import type { TxOf } from '../src/store/types.js';
import type { PrismaClient } from './helpers/prisma/generated/client.js';
import type { PrismaTx } from './helpers/orm-stores.js';

interface ChargesDB {
  charges: { id: Generated<number>; amount: number };
}

export function kyselyInferred(db: Kysely<ChargesDB>, app: Hono<{ Variables: IdempotencyVariables<Transaction<ChargesDB>> }>): void {
  const store = new PostgresStore({ client: kysely(db) });
  const same: Transaction<ChargesDB> = null as unknown as TxOf<typeof store>;
  void same;
  app.post('/v1/charges', hono({ store }), async (c) => {
    const idem = c.get('idem')!;
    await idem.phase('charge', (tx) => tx.insertInto('charges').values({ amount: 1 }).execute());
    // @ts-expect-error the table is checked: tx is Transaction<ChargesDB>, not any
    await idem.phase('other', (tx) => tx.insertInto('refunds').values({ amount: 1 }).execute());
    return c.text('ok');
  });
  const ctx = express({ store }).context({ locals: {} })!;
  void ctx.respond(async (tx) => {
    // @ts-expect-error the row's shape is checked
    await tx.insertInto('charges').values({ amount: 'two' }).execute();
    return new Response('ok');
  });
  const engine = new IdempotencyEngine({ store });
  void engine.takeOver({ scope: 's', key: 'k', token: 1 }).then((run) => run?.phase('p', (tx) => tx.selectFrom('charges').selectAll().execute()));
}

export function prismaInferred(client: PrismaClient): void {
  const store = new PostgresStore({ client: prisma(client, { transaction: { timeout: 10_000 } }) });
  const same: PrismaTx = null as unknown as TxOf<typeof store>;
  void same;
  const ctx = express({ store }).context({ locals: {} })!;
  void ctx.phase('charge', (tx) => tx.effect.create({ data: { run: 'r', note: 'n' } }));
  // @ts-expect-error the model's fields are checked: tx is Prisma's transaction client, not any
  void ctx.phase('bad', (tx) => tx.effect.create({ data: { run: 'r', note: 1 } }));
}
