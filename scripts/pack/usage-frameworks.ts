// Type-checked by scripts/check-pack.sh against the packed tarball, strict and NodeNext, but
// with skipLibCheck on: the uses of idem's adapters with frameworks whose own .d.ts do not pass
// skipLibCheck off (@types/koa against the content-disposition it resolves; @middy/core, which
// imports types from `aws-lambda`; next, whose .d.ts need
// react-dom, webpack and newer DOM types; drizzle-orm, whose sqlite-core .d.ts fail on their own).
// idem's own .d.ts are
// checked with skipLibCheck off in usage.ts, which imports every subpath.
import middy from '@middy/core';
import { drizzle as drizzleMysql2 } from 'drizzle-orm/mysql2';
import { int, mysqlTable } from 'drizzle-orm/mysql-core';
import { IdempotencyEngine } from 'idem';
import { drizzleMySql, MySqlStore } from 'idem/mysql';
import mysql from 'mysql2/promise';
import { type IdempotencyState, idempotency as koaIdempotency } from 'idem/koa';
import { type IdempotentLambdaContext, type LambdaHttpEvent, idempotency as middyIdempotency } from 'idem/lambda';
import { withIdempotency } from 'idem/next';
import type { Queryable } from 'idem/postgres';
import { PostgresStore, type SqlClient } from 'idem/postgres';
import Koa from 'koa';
import type { NextRequest } from 'next/server.js';

declare const sqlClient: SqlClient;
const store = new PostgresStore({ client: sqlClient });

// Koa: the middleware first (it reads the raw body), the context in ctx.state.
const koa = new Koa<IdempotencyState<Queryable>>();
koa.use(koaIdempotency<Queryable>({ store, required: true }));
koa.use(async (ctx) => {
  const charge = await ctx.state.idem?.phase('charge_created', async (tx) => (await tx.query('SELECT 1')).rows.length);
  ctx.status = 201;
  ctx.body = { key: ctx.state.idem?.key, charge };
});

// Middy: idem first, then the handler reads the context Middy carries.
export const handler = middy(async (event: LambdaHttpEvent, context: IdempotentLambdaContext<Queryable>) => ({
  statusCode: 201,
  body: JSON.stringify({ key: context.idem?.key, v2: 'rawPath' in event }),
})).use(middyIdempotency<Queryable>({ store, required: true }));

// Next.js App Router: app/api/charges/[id]/route.ts, with Next's own request type.
export const POST = withIdempotency<Queryable, NextRequest, { params: Promise<{ id: string }> }>({ store, required: true }, async (request, ctx, idem) => {
  const { id } = await ctx.params;
  return Response.json({ id, key: idem?.key, path: request.nextUrl.pathname }, { status: 201 });
});
console.log(koa);

// idem/mysql on Drizzle (drizzle-orm/mysql2): a phase's tx is Drizzle's own MySQL transaction, inferred.
const charges = mysqlTable('charges', { id: int('id').primaryKey().autoincrement(), amount: int('amount').notNull() });
const drizzleMyStore = new MySqlStore({ client: drizzleMySql(drizzleMysql2({ client: mysql.createPool({ uri: 'mysql://root@127.0.0.1:3306/test' }) })) });
void new IdempotencyEngine({ store: drizzleMyStore }).takeOver({ scope: 's', key: 'k', token: 1 }).then((run) =>
  run?.phase('charge', async (tx) => {
    await tx.insert(charges).values({ amount: 1 });
    // @ts-expect-error Drizzle's transaction has no mysql2 query method
    await tx.query('SELECT 1');
  }),
);
