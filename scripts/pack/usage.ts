// Type-checked by scripts/check-pack.sh against the packed tarball's .d.ts files (strict,
// NodeNext, skipLibCheck off): one use of every subpath in package.json `exports`, and the
// internals that must stay out of the public types. Uses that need a framework whose own .d.ts
// fail with skipLibCheck off (@types/koa, @middy/core without @types/aws-lambda, next) are in
// usage-frameworks.ts, checked with skipLibCheck on.
import { Controller, Module, Post } from '@nestjs/common';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import {
  Completer,
  type Execution,
  HttpIdempotency,
  type IdempotencyError,
  IdempotencyEngine,
  type IdempotencyContext,
  type IdempotencyStore,
  type TxOf,
  KeyState,
  ProblemKind,
  ReplayCache,
  type ReplayCacheStats,
  deriveKey,
  fingerprint,
  problemResponse,
} from 'idem';
import { type AmqpConfirmChannelLike, amqpPublisher, consumeAmqp } from 'idem/amqp';
import { drizzle } from 'idem/drizzle';
import { IdempotentClient, MemoryIntentStore } from 'idem/client';
import { FileIntentStore } from 'idem/client/node';
import { IdempotentConsumer, type Disposition, type MessageContext } from 'idem/consumer';
import { decide, mediaType, parseIdempotencyKey } from 'idem/core';
import { type FunctionContext, idempotent, KeyMismatchError } from 'idem/function';
import { idempotency as expressIdempotency } from 'idem/express';
import { idempotency as honoIdempotency, type IdempotencyVariables } from 'idem/hono';
import { captureResponse, credentialScope, replayResponse } from 'idem/http';
import { idempotency as fastifyIdempotency } from 'idem/fastify';
import { type HttpIdempotency as KoaCore, type IdempotencyState, type KoaIdempotency, idempotency as koaIdempotency } from 'idem/koa';
import {
  type ApiGatewayProxyEventV2,
  type LambdaContextLike,
  type MiddyIdempotency,
  idempotency as middyIdempotency,
  withIdempotency as withLambdaIdempotency,
} from 'idem/lambda';
import { MemoryStore, type MemoryTx } from 'idem/memory';
import { IdemContext, Idempotent, IdempotencyModule } from 'idem/nestjs';
import { withIdempotency as withNextIdempotency } from 'idem/next';
import { sqsBatch } from 'idem/lambda';
import { github, webhookReceiver } from 'idem/webhooks';
import { idempotentTool, KEY_META } from 'idem/mcp';
import { idempotentExecute, KeyMismatchError as ToolKeyMismatchError } from 'idem/ai';
import { openTelemetry } from 'idem/otel';
import { forgetKey, releaseKey, type OperatorOutcome } from 'idem/operator';
import { idempotencyComponents, withIdempotency } from 'idem/openapi';
import { NO_TRANSACTION, RedisStore, type NoTransaction } from 'idem/redis';
import { DynamoDbStore, type DynamoDbClientLike, type DynamoDbTx } from 'idem/dynamodb';
import { type JetStreamPublisherLike, type JsMsgLike, consumeJetStream, jetStreamPublisher } from 'idem/nats';
import { consumeSqs, IDEM_REASON_ATTRIBUTE, SqsConsumer, type SqsClientLike, type SqsMessageLike } from 'idem/sqs';
import { Outbox, OutboxRelay, PostgresStore, type Queryable, type SqlClient, type SqlDriver } from 'idem/postgres';
import { postgresjs } from 'idem/postgresjs';
import { MySqlStore } from 'idem/mysql';
import { D1Store, type D1DatabaseLike, DurableObjectStore, type DurableObjectNamespaceLike } from 'idem/cloudflare';
import { IdemKeyObject } from 'idem/cloudflare/object';
import mysql from 'mysql2/promise';
import { SqliteStore } from 'idem/sqlite';
import { createGateway, FENCING_TOKEN_HEADER } from 'idem/gateway';
import Database from 'better-sqlite3';
import { createClient } from '@libsql/client';
import type { Generated, Kysely } from 'kysely';
import { kysely } from 'idem/kysely';
import { type PrismaRawLike, prisma } from 'idem/prisma';
import postgres from 'postgres';

// A pg.Pool or a PGlite instance (PGlite's own .d.ts does not pass skipLibCheck: false).
declare const sqlClient: SqlClient;

const store: IdempotencyStore<Queryable> = new PostgresStore({ client: sqlClient });
const engine = new IdempotencyEngine<Queryable>({ store, leaseMs: 30_000, telemetry: await openTelemetry() });
const waiting = new IdempotencyEngine<Queryable>({ store: new PostgresStore({ client: sqlClient, notify: true }), inProgress: { wait: 5_000 } });
console.log(waiting.waitMs);
const begun = await engine.begin({ scope: 'jobs', key: 'job-1', fingerprint: fingerprint({ method: 'JOB', path: 'invoice', body: null }) });
if (begun.kind === 'execute') {
  const execution: Execution<Queryable> = begun.execution;
  const external: string = execution.derivedKey('psp');
  await execution.phase('created', async (tx) => (await tx.query('SELECT 1')).rows.length);
  console.log(external);
}
const http = new HttpIdempotency<Queryable>({ store, required: true });
const completer = new Completer<Queryable>({ http, run: () => new Response(null, { status: 204 }) });
const handled: Response = await http.handle(new Request('http://local/'), async (_req, ctx: IdempotencyContext<Queryable> | undefined) =>
  problemResponse({ type: 'about:blank', title: ctx?.key ?? 'unprotected', status: 400 }),
);
const state: KeyState = KeyState.Done;
const kind: ProblemKind = ProblemKind.InProgress;
const error: IdempotencyError | undefined = undefined;
console.log(deriveKey('s', 'k', 'claim', 'psp'), completer, handled, state, kind, error);
const released: OperatorOutcome = await releaseKey(store, 'jobs', 'job-1', { by: 'ops', force: false });
console.log(released.message, (await forgetKey(store, 'jobs', 'job-1')).done);
console.log(withIdempotency({ openapi: '3.1.0', paths: {} }, { required: true }), Object.keys(idempotencyComponents()));

// Building blocks, off the root.
console.log(decide, mediaType('application/json'), parseIdempotencyKey('"k"'), captureResponse, replayResponse, credentialScope(new Headers()));

// Adapters and client.
const app = new Hono<{ Variables: IdempotencyVariables<Queryable> }>();
app.post('/x', honoIdempotency<Queryable>({ store }), (c) => c.json({ key: c.get('idem')?.key }));
const expressApp = express();
const idem = expressIdempotency<Queryable>({ store });
expressApp.post('/x', idem, (_req, res) => res.json({ key: idem.context(res)?.key }));
const client = new IdempotentClient({ store: new MemoryIntentStore() });
const fileClient = new IdempotentClient({ store: new FileIntentStore({ dir: '/tmp/idem-intents' }) });
console.log(client, fileClient);

// Stores: in memory (tests), and Redis through a node-redis-shaped client (the slice of
// `createClient()` idem calls, declared here so this file needs no Redis package).
const memoryStore = new MemoryStore();
const memoryEngine = new IdempotencyEngine<MemoryTx>({ store: memoryStore });
// The replay cache (protocol.md K20): an instance, or its options.
const replayCache = new ReplayCache({ maxBytes: 8 * 1024 * 1024, marginMs: 1000, sealed: false });
const cachedEngine = new IdempotencyEngine<MemoryTx>({ store: memoryStore, replayCache });
const cacheStats: ReplayCacheStats = replayCache.stats();
void new IdempotencyEngine<MemoryTx>({ store: new MemoryStore(), replayCache: { maxBytes: 1024 } });
const swept: number = await memoryStore.sweep({ retentionMs: 86_400_000 });
interface NodeRedisClient {
  connect(): Promise<unknown>;
  sendCommand(args: string[]): Promise<unknown>;
  quit(): Promise<string>;
}
declare const redisClient: NodeRedisClient;
const redisStore = new RedisStore({ client: redisClient, prefix: 'idem:' });
const redisEngine = new IdempotencyEngine<NoTransaction>({ store: redisStore, leaseMs: 30_000 });
const noTx: NoTransaction = NO_TRANSACTION;
// DynamoDB through anything with a DynamoDBClient's `send` (the SDK is the store's optional peer).
declare const dynamoClient: DynamoDbClientLike;
const dynamoStore = new DynamoDbStore({ client: dynamoClient, table: 'idempotency_keys', clockSkewMs: 1000 });
const dynamoEngine = new IdempotencyEngine<DynamoDbTx>({ store: dynamoStore });
console.log(memoryEngine, cachedEngine, cacheStats.hits, swept, memoryStore.size, redisEngine, noTx.atomic, dynamoEngine);

// Fastify: the plugin on an instance, routes opt in through their config.
const fastify = Fastify();
await fastify.register(fastifyIdempotency, { store, required: true });
fastify.post('/v1/charges', { config: { idempotency: true } }, async (request, reply) => reply.code(201).send({ key: request.idem?.key }));

// Koa: the middleware and its state type (mounted on a Koa app in usage-frameworks.ts).
const koaMiddleware: KoaIdempotency<Queryable> = koaIdempotency<Queryable>({ store, required: true });
const koaCore: KoaCore<Queryable> = koaMiddleware.core;
const koaState: IdempotencyState<Queryable> = { idem: undefined };

// NestJS: the module, @Idempotent() on a route, @IdemContext() on its parameter (applied by
// hand: this file is compiled without decorator syntax).
class ChargesController {
  create(_body: unknown, idem: IdempotencyContext<Queryable> | undefined): { key: string | undefined } {
    return { key: idem?.key };
  }
}
Post('charges')(ChargesController.prototype, 'create', Object.getOwnPropertyDescriptor(ChargesController.prototype, 'create')!);
Idempotent({ required: true })(ChargesController.prototype, 'create', Object.getOwnPropertyDescriptor(ChargesController.prototype, 'create')!);
IdemContext()(ChargesController.prototype, 'create', 1);
Controller('v1')(ChargesController);
class AppModule {}
Module({ imports: [IdempotencyModule.forRoot<Queryable>({ store, required: true })], controllers: [ChargesController] })(AppModule);
const asyncModule = IdempotencyModule.forRootAsync<Queryable>({ useFactory: () => ({ store }) });

// Next.js App Router: a wrapped route handler (with Next's own NextRequest in usage-frameworks.ts).
export const POST = withNextIdempotency<Queryable, Request, { params: Promise<{ id: string }> }>({ store, required: true }, async (request, ctx, idem) => {
  const { id } = await ctx.params;
  return Response.json({ id, key: idem?.key, path: new URL(request.url).pathname }, { status: 201 });
});

// AWS Lambda: the wrapped handler, and the Middy middleware.
export const handler = withLambdaIdempotency<Queryable, ApiGatewayProxyEventV2, LambdaContextLike, { statusCode: number; body: string }>(
  { store, required: true },
  async (event, context, idem) => ({
    statusCode: 201,
    body: JSON.stringify({ key: idem?.key, path: event.rawPath, leftMs: context.getRemainingTimeInMillis() }),
  }),
);
// The Middy middleware's hooks (used with @middy/core in usage-frameworks.ts).
const middyMiddleware: MiddyIdempotency = middyIdempotency<Queryable>({ store, required: true });
console.log(fastify, koaCore, koaState, AppModule, asyncModule, middyMiddleware.before);

// Queue consumers.
const consumer = new IdempotentConsumer<Queryable>({ store, scope: 'orders', maxAttempts: 5 });
const disposition: Disposition = await consumer.consume({ id: 'm1', body: new Uint8Array(), attempt: 1 }, async (ctx: MessageContext<Queryable>) => {
  await ctx.phase('invoice', async (tx) => (await tx.query('SELECT 1')).rows.length);
});
console.log(disposition.action);
// Broker adapters over the brokers' own clients (amqplib's ConfirmChannel, a JetStream consumer).
declare const amqpChannel: AmqpConfirmChannelLike;
declare const jsMessages: AsyncIterable<JsMsgLike>;
declare const js: JetStreamPublisherLike;
const running = await consumeAmqp({ channel: amqpChannel, queue: 'orders', consumer, handler: async () => {} });
await running.stop();
await consumeJetStream({ messages: jsMessages, consumer, handler: async () => {}, ackWaitMs: 30_000 });
// SQS outside Lambda through anything with an SQSClient's `send` (the SDK is idem/sqs's optional peer).
declare const sqsClient: SqsClientLike;
const sqsConsumer = new SqsConsumer({
  client: sqsClient,
  queueUrl: 'https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo',
  consumer,
  handler: async () => {},
  visibilityTimeoutSec: 60,
  deadLetterQueueUrl: 'https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq.fifo',
  messageId: { attribute: 'idem-key' },
}).start();
await sqsConsumer.stop();
const keyOf = (m: SqsMessageLike) => m.MessageAttributes?.['order-id']?.StringValue;
await consumeSqs({
  client: sqsClient,
  queueUrl: 'https://sqs.us-east-1.amazonaws.com/123456789012/orders',
  consumer,
  handler: async () => {},
  messageId: keyOf,
}).stop();
console.log(sqsConsumer.leaseMs, IDEM_REASON_ATTRIBUTE);
await amqpPublisher(amqpChannel)({ id: 'm1', destination: 'orders', body: new Uint8Array(), contentType: null });
await jetStreamPublisher(js)({ id: 'm1', destination: 'orders', body: new Uint8Array(), contentType: null });
const outbox = new Outbox({ client: sqlClient });
await consumer.consume({ id: 'm2', body: new Uint8Array() }, (ctx) =>
  ctx.complete((tx) => outbox.enqueueJson(tx, { id: 'invoice-created:m2', destination: 'invoices', body: { ok: true } })),
);
const relayed: number = await new OutboxRelay({ outbox, publish: amqpPublisher(amqpChannel) }).relayOnce();
console.log(relayed);

// postgres.js: a phase's tx is postgres.js's own TransactionSql, inferred from the store (TxOf).
const pgjs = postgres('postgres://localhost/app', { max: 4 });
const pgjsDriver: SqlDriver<postgres.TransactionSql> = postgresjs(pgjs);
const pgjsEngine = new IdempotencyEngine({ store: new PostgresStore({ client: pgjsDriver }) });
const pgjsRun = await pgjsEngine.begin({ scope: 'jobs', key: 'job-2', fingerprint: fingerprint({ method: 'JOB', path: 'x', body: null }) });
if (pgjsRun.kind === 'execute') {
  const sameTx: TxOf<typeof pgjsEngine.store> = await pgjsRun.execution.phase('pgjs', async (tx) => tx);
  console.log((await sameTx`SELECT 1 AS one`).count);
}
// Drizzle: a phase's tx is the database's own transaction type (the slice of drizzle-orm's
// PgDatabase idem reads, declared here: drizzle-orm's .d.ts are not what this file checks).
interface DrizzleTx {
  insert(table: 'charges'): { values(row: { amount: number }): Promise<void> };
}
declare const drizzleDb: { transaction<T>(fn: (tx: DrizzleTx) => Promise<T>): Promise<T>; $client: SqlClient };
const drizzleEngine = new IdempotencyEngine({ store: new PostgresStore({ client: drizzle(drizzleDb) }) });
const drizzleBegun = await drizzleEngine.begin({ scope: 'jobs', key: 'job-3', fingerprint: fingerprint({ method: 'JOB', path: 'x', body: null }) });
if (drizzleBegun.kind === 'execute') await drizzleBegun.execution.phase('charge', (tx) => tx.insert('charges').values({ amount: 1 }));

// Kysely and Prisma: a phase's tx is the client's own transaction, inferred from the store.
declare const kdb: Kysely<{ charges: { id: Generated<number>; amount: number } }>;
const kyselyEngine = new IdempotencyEngine({ store: new PostgresStore({ client: kysely(kdb) }) });
void kyselyEngine
  .takeOver({ scope: 's', key: 'k', token: 1 })
  .then((run) => run?.phase('charge', (tx) => tx.insertInto('charges').values({ amount: 1 }).execute()));
// A generated PrismaClient, as far as idem and this phase see it.
interface PrismaTxLike extends PrismaRawLike {
  charge: { create(args: { data: { amount: number } }): Promise<{ id: number }> };
}
declare const prismaClient: PrismaRawLike & { $transaction<R>(fn: (tx: PrismaTxLike) => Promise<R>, options?: { timeout?: number }): Promise<R> };
const prismaEngine = new IdempotencyEngine({ store: new PostgresStore({ client: prisma(prismaClient, { transaction: { timeout: 10_000 } }) }) });
void prismaEngine.takeOver({ scope: 's', key: 'k', token: 1 }).then((run) => run?.phase('charge', (tx) => tx.charge.create({ data: { amount: 1 } })));

// A plain function: typed arguments and result, phases through its context.
const closeDay = idempotent(async (ctx: FunctionContext<MemoryTx, { day: string }>, day: string) => ({ day: await ctx.phase('totals', async () => day) }), {
  store: new MemoryStore(),
  name: 'close-day',
  key: (day) => day,
});
const closed: { day: string } = await closeDay('2026-03-01');
void closed;
void KeyMismatchError;

// A Lambda batch: the partial batch response.
const sqsHandler = sqsBatch<MemoryTx>({ store: new MemoryStore(), scope: 'orders' }, async (record, ctx) => ctx.phase('seen', async () => record.messageId));
const batchResponse: { batchItemFailures: Array<{ itemIdentifier: string }> } = await sqsHandler({ Records: [] }, { getRemainingTimeInMillis: () => 1000 });
void batchResponse;

// A webhook receiver: the signature checked before the claim.
const receiveGithub = webhookReceiver<MemoryTx>(github({ secret: 's' }), { store: new MemoryStore() });
const webhookAnswer: Response = await receiveGithub(
  new Request('http://localhost/hook', { method: 'POST', body: '{}' }),
  async () => new Response(null, { status: 204 }),
);
void webhookAnswer;

// An MCP tool registered through idem on anything with McpServer's registerTool.
const registered: string[] = [];
idempotentTool(
  { registerTool: (name: string) => registered.push(name) },
  'create_refund',
  { description: 'Refunds an order' },
  async (_args, extra, ctx) => {
    await ctx.phase('refund', async () => 1);
    return { content: [{ type: 'text', text: String(extra._meta?.[KEY_META]) }] };
  },
  { store: new MemoryStore(), keyFields: [] },
);

// An agent tool's execute (AI SDK, OpenAI Agents JS, LangChain JS) run once per intent.
const refundExecute = idempotentExecute(
  'create_refund',
  async (input: { orderId: string; cents: number }, _options, ctx) => ctx.phase('refund', async () => ({ refunded: input.cents })),
  { store: new MemoryStore(), principal: 'user-1', keyFields: ['orderId', 'cents'] },
);
const refundOutput: { refunded: number } = await refundExecute({ orderId: 'o-1', cents: 5 }, { toolCallId: 'call_1', messages: [] });
void refundOutput;
void ToolKeyMismatchError;

// MySQL / MariaDB on a mysql2 promise pool: a phase's tx is the pool's own PoolConnection.
const mysqlStore = new MySqlStore({ client: mysql.createPool({ uri: 'mysql://root@127.0.0.1:3306/test' }), storeTimeoutMs: 5000 });
const mysqlEngine = new IdempotencyEngine({ store: mysqlStore });
void mysqlEngine
  .takeOver({ scope: 's', key: 'k', token: 1 })
  .then((run) => run?.phase('charge', async (tx) => (await tx.query('INSERT INTO charges (amount) VALUES (?)', [1]))[0]));

// SQLite: a phase's tx is what the client hands a transaction (better-sqlite3's Database, libSQL's Transaction).
const sqliteEngine = new IdempotencyEngine({ store: new SqliteStore({ client: new Database('app.db'), busyTimeoutMs: 5000 }) });
void sqliteEngine
  .takeOver({ scope: 's', key: 'k', token: 1 })
  .then((run) => run?.phase('charge', async (tx) => tx.prepare('INSERT INTO charges (amount) VALUES (?)').run(1).changes));
const libsqlEngine = new IdempotencyEngine({ store: new SqliteStore({ client: createClient({ url: 'file:app.db', timeout: 5000 }) }) });
void libsqlEngine
  .takeOver({ scope: 's', key: 'k', token: 1 })
  .then((run) => run?.phase('charge', async (tx) => (await tx.execute({ sql: 'INSERT INTO charges (amount) VALUES (?)', args: [1] })).rowsAffected));
// Cloudflare Workers: the Durable Objects store on the binding's namespace; a phase's tx is NoTransaction.
declare const idemNamespace: DurableObjectNamespaceLike;
const doStore = new DurableObjectStore({ namespace: idemNamespace });
const doEngine = new IdempotencyEngine({ store: doStore });
void doEngine.takeOver({ scope: 's', key: 'k', token: 1 }).then((run) => run?.phase('charge', async (tx) => tx.atomic));
// The object class a Worker exports for its binding (workerd only; typed by `wrangler types`).
export class KeyObject extends IdemKeyObject {}
// The D1 store on the binding: a phase's tx collects D1 statements, run in one batch with the recovery point.
declare const d1: D1DatabaseLike;
const d1Engine = new IdempotencyEngine({ store: new D1Store({ database: d1 }) });
void d1Engine
  .takeOver({ scope: 's', key: 'k', token: 1 })
  .then((run) => run?.phase('charge', async (tx) => tx.write(tx.db.prepare('INSERT INTO charges (amount) VALUES (?)').bind(1))));

// The gateway: a reverse proxy on any store, scoped per principal.
const gateway = createGateway({
  store: new MemoryStore(),
  config: {
    upstream: 'http://127.0.0.1:8000',
    listen: ':8080',
    principal: { hash: 'authorization' },
    routes: [{ path: '/v1/*', methods: ['POST'], required: true }],
  },
});
void gateway.listen().then((url: string) => `${url} ${FENCING_TOKEN_HEADER}`);

// Internals stay out of the public types.
// @ts-expect-error Execution is created by the engine, never by users
new (await import('idem/core')).Execution();
// @ts-expect-error decide lives in idem/core, not the root
import('idem').then((m) => m.decide);
