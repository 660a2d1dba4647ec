/**
 * idem/sqs on fauxqs, an SQS emulator run in this process (its gaps against SQS are listed in
 * docs/guides/sqs.md): five deliveries of one message make one effect, the lease is shorter
 * than the visibility timeout (refused otherwise), the heartbeat keeps a long handler's message
 * hidden and its lease alive, a poison message is dead-lettered after maxAttempts, FIFO groups
 * run in order, stop() waits for the message in flight, and a consumer process SIGKILLed
 * mid-handler is taken over, fenced, after the visibility timeout (DATABASE_URL: the store is
 * shared between processes). The store is PostgreSQL (DATABASE_URL) and embedded PGlite.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import {
  ChangeMessageVisibilityCommand,
  CreateQueueCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SQSClient,
  SendMessageCommand,
} from '@aws-sdk/client-sqs';
import { engines, tableName, useEngine } from './helpers/engines.js';
import { consumerTables, until } from './helpers/consumer-setup.js';
import { IdempotentConsumer, type ConsumedMessage, type Disposition, type MessageContext } from '../src/consumer/index.js';
import { IdempotencyError, InvalidOptionError } from '../src/core/errors.js';
import { IDEM_REASON_ATTRIBUTE, SqsConsumer, type SqsClientLike } from '../src/sqs/index.js';
import type { IdempotencyEvent } from '../src/engine/execution.js';
import type { Queryable } from '../src/postgres/client.js';
import { startConsumer } from '../examples/sqs/consumer.js';

type Fauxqs = { address: string; stop(): Promise<void> };
/** fauxqs needs node:sqlite (Node 22.13+); on a Node without it the suite is skipped. */
let startFauxqs: ((options: { port: number; logger: boolean }) => Promise<Fauxqs>) | undefined;
try {
  ({ startFauxqs } = (await import('fauxqs')) as unknown as { startFauxqs: typeof startFauxqs });
} catch {
  startFauxqs = undefined;
}
const skip = startFauxqs ? false : 'fauxqs (the SQS emulator) needs node:sqlite, Node 22.13 or later';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };

/** Counts the SQS commands a client sends, and those answered, by name. */
function counting(client: SQSClient): { client: SqsClientLike; sent: Map<string, number>; answered: Map<string, number> } {
  const sent = new Map<string, number>();
  const answered = new Map<string, number>();
  const add = (map: Map<string, number>, name: string) => map.set(name, (map.get(name) ?? 0) + 1);
  return {
    sent,
    answered,
    client: {
      send(command: { constructor: { name: string } }, options?: { abortSignal?: AbortSignal }) {
        const name = command.constructor.name;
        add(sent, name);
        return client.send(command as never, options).finally(() => add(answered, name));
      },
    },
  };
}

for (const engine of engines) {
  describe(`idem/sqs on fauxqs, store on ${engine.name}`, { skip }, () => {
    const db = useEngine(engine);
    let server: Fauxqs;
    let sqs: SQSClient;
    const running: SqsConsumer<Queryable>[] = [];
    before(async () => {
      server = await startFauxqs!({ port: 0, logger: false });
      sqs = new SQSClient({ endpoint: server.address, region: 'us-east-1', credentials });
    });
    after(async () => {
      await Promise.all(running.map((c) => c.stop()));
      sqs?.destroy();
      await server?.stop();
    });

    async function queue(fifo = false, attributes: Record<string, string> = {}): Promise<string> {
      const name = `idem-test-${randomBytes(5).toString('hex')}${fifo ? '.fifo' : ''}`;
      const out = await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: fifo ? { FifoQueue: 'true', ...attributes } : attributes }));
      return out.QueueUrl!;
    }
    /** Messages visible plus in flight. */
    async function depth(queueUrl: string): Promise<number> {
      const out = await sqs.send(
        new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'] }),
      );
      return Number(out.Attributes?.ApproximateNumberOfMessages) + Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible);
    }
    function start(consumer: SqsConsumer<Queryable>): SqsConsumer<Queryable> {
      running.push(consumer);
      return consumer.start();
    }

    it('five deliveries of one message (a producer resending it with its idem-key): one effect, five deletes', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const queueUrl = await queue();
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: queueUrl });
      const seen: Disposition[] = [];
      const options = {
        client: sqs,
        queueUrl,
        consumer,
        messageId: { attribute: 'idem-key' },
        waitTimeSeconds: 1,
        concurrency: 5,
        handler: async (ctx: MessageContext<Queryable>) => {
          await ctx.complete((tx) => t.insert(tx, ctx.key));
        },
        onDisposition: (d: Disposition) => seen.push(d),
      };
      // Two consumers on one queue, as two ECS tasks would be.
      const a = start(new SqsConsumer(options));
      const b = start(new SqsConsumer(options));
      const key = randomUUID();
      for (let i = 0; i < 5; i++) {
        await sqs.send(
          new SendMessageCommand({
            QueueUrl: queueUrl,
            MessageBody: JSON.stringify({ order: key }),
            MessageAttributes: { 'idem-key': { DataType: 'String', StringValue: key } },
          }),
        );
      }
      await until(() => seen.filter((d) => d.action === 'ack').length === 5, 60_000, 'five acks');
      await Promise.all([a.stop(), b.stop()]);
      assert.equal(seen.filter((d) => d.action === 'ack' && d.reason === 'processed').length, 1);
      assert.equal(seen.filter((d) => d.action === 'ack' && d.reason === 'duplicate').length, 4);
      assert.equal((await t.counts()).get(key), 1);
      assert.equal(await depth(queueUrl), 0, 'every delivery was deleted');
    });

    it('examples/sqs/consumer.ts: one invoice per idem-key, a resend deleted as a duplicate, a reused key with another order dead-lettered', async () => {
      const client = db.client() as Queryable;
      const table = tableName();
      const invoices = tableName('invoices');
      db.cleanup(async () => {
        await client.query(`DROP TABLE IF EXISTS "${invoices}"`);
        await client.query(`DROP TABLE IF EXISTS "${table}"`);
        await client.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
      });
      const seen: Disposition[] = [];
      const queueName = `orders-${randomBytes(4).toString('hex')}`;
      const example = await startConsumer({
        sqs,
        db: db.client() as never,
        queue: queueName,
        table,
        invoices,
        waitTimeSeconds: 1,
        onDisposition: (d) => seen.push(d),
      });
      const orderId = randomUUID();
      const send = (amount: number) =>
        sqs.send(
          new SendMessageCommand({
            QueueUrl: example.queueUrl,
            MessageBody: JSON.stringify({ orderId, amount }),
            MessageAttributes: { 'idem-key': { DataType: 'String', StringValue: orderId } },
          }),
        );
      await send(100);
      await until(() => seen.length === 1, 60_000, 'the first');
      await send(100);
      await send(999);
      await until(() => seen.length === 3, 60_000, 'three dispositions');
      await example.stop();
      assert.deepEqual(seen.map((d) => `${d.action}:${d.reason}`).sort(), ['ack:duplicate', 'ack:processed', 'dead-letter:mismatch']);
      const rows = (await client.query(`SELECT amount FROM "${invoices}" WHERE order_id = $1`, [orderId])).rows;
      assert.deepEqual(
        rows.map((r) => Number(r.amount)),
        [100],
      );
      assert.equal(await depth(example.queueUrl), 0);
      assert.equal(await depth(example.deadLetterQueueUrl), 1);
    });

    it('refuses a lease not shorter than the visibility timeout, at construction, with a typed error', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: 'q' });
      const base = { client: sqs, queueUrl: 'http://x/q', consumer, handler: async () => undefined };
      for (const bad of [
        { visibilityTimeoutSec: 10, leaseMs: 10_000 },
        { visibilityTimeoutSec: 10, leaseMs: 12_000 },
        { visibilityTimeoutSec: 0 },
        { visibilityTimeoutSec: 43_201 },
      ]) {
        assert.throws(
          () => new SqsConsumer({ ...base, ...bad }),
          (error: unknown) => error instanceof InvalidOptionError && error instanceof IdempotencyError && error.code === 'IDEM_INVALID_OPTION',
          JSON.stringify(bad),
        );
      }
      const derived = new SqsConsumer({ ...base, visibilityTimeoutSec: 30 });
      assert.equal(derived.leaseMs, 20_000, 'two thirds of the visibility timeout');
      assert.ok(derived.heartbeatMs < derived.leaseMs);
      assert.equal(new SqsConsumer({ ...base, visibilityTimeoutSec: 10, leaseMs: 9_999 }).leaseMs, 9_999);
    });

    it('the heartbeat extends visibility and lease together: a handler outliving both keeps its message and its key', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const queueUrl = await queue();
      const events: IdempotencyEvent[] = [];
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: queueUrl, onEvent: (e) => events.push(e) });
      const { client, sent } = counting(sqs);
      const seen: Disposition[] = [];
      const other: Disposition[] = [];
      let leaseAlive: boolean | undefined;
      // Visibility 1 s, lease 666 ms, a beat every 222 ms.
      const slow = start(
        new SqsConsumer({
          client,
          queueUrl,
          consumer,
          visibilityTimeoutSec: 1,
          waitTimeSeconds: 1,
          handler: async (ctx) => {
            // Work until the beats have covered twice the visibility timeout (9 × 222 ms).
            await until(() => (sent.get('ChangeMessageVisibilityCommand') ?? 0) >= 9, 60_000, 'nine beats');
            const record = await t.store.get(queueUrl, ctx.key, consumer.engine.retentionMs);
            leaseAlive = record?.state === 'started' && !record.leaseExpired;
            await ctx.complete((tx) => t.insert(tx, ctx.key));
          },
          onDisposition: (d) => seen.push(d),
        }),
      );
      // A second consumer on the queue: it would get the message if its visibility lapsed.
      const rival = start(
        new SqsConsumer({
          client: sqs,
          queueUrl,
          consumer,
          visibilityTimeoutSec: 1,
          waitTimeSeconds: 1,
          handler: async () => undefined,
          onDisposition: (d) => other.push(d),
        }),
      );
      const sentId = (await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: 'long work' }))).MessageId!;
      await until(() => seen.length === 1, 60_000, 'the disposition');
      await Promise.all([slow.stop(), rival.stop()]);
      assert.deepEqual(seen, [{ action: 'ack', reason: 'processed' }]);
      assert.deepEqual(other, [], 'the message never became visible to the other consumer');
      assert.equal(leaseAlive, true, 'the lease was extended past its 666 ms');
      assert.ok(!events.some((e) => e.type === 'taken-over' || e.type === 'lease-lost'), 'never taken over');
      assert.equal((await t.counts()).get(sentId), 1);
    });

    it('a poison message is dead-lettered after maxAttempts receives, with its reason; a mismatch at once', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const queueUrl = await queue();
      const dlq = await queue();
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: queueUrl, maxAttempts: 3, retryDelayMs: 0 });
      const attempts: number[] = [];
      const seen: Array<{ d: Disposition; m: ConsumedMessage }> = [];
      const c = start(
        new SqsConsumer({
          client: sqs,
          queueUrl,
          consumer,
          deadLetterQueueUrl: dlq,
          messageId: { attribute: 'idem-key' },
          waitTimeSeconds: 1,
          concurrency: 1,
          handler: async (ctx) => {
            if (ctx.key.startsWith('poison-')) {
              attempts.push(ctx.attempt);
              throw new Error('cannot be processed');
            }
            await ctx.complete((tx) => t.insert(tx, ctx.key));
          },
          onDisposition: (d, m) => seen.push({ d, m }),
        }),
      );
      const poison = `poison-${randomUUID()}`;
      const order = randomUUID();
      const send = (key: string, body: string) =>
        sqs.send(
          new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: body, MessageAttributes: { 'idem-key': { DataType: 'String', StringValue: key } } }),
        );
      await send(poison, 'poison');
      await send(order, '{"amount":1}');
      await until(() => seen.some((s) => s.m.id === order && s.d.action === 'ack'), 60_000, 'the order');
      await send(order, '{"amount":2}'); // the same key with another payload
      await until(() => seen.filter((s) => s.d.action === 'dead-letter').length === 2, 60_000, 'two dead letters');
      await c.stop();
      assert.deepEqual(attempts, [1, 2, 3], "SQS's ApproximateReceiveCount is the attempt");
      const dead = seen.filter((s) => s.d.action === 'dead-letter').map((s) => `${s.m.id}:${s.d.reason}`);
      assert.deepEqual(dead.sort(), [`${order}:mismatch`, `${poison}:max-attempts`].sort());
      const copies = (await sqs.send(new ReceiveMessageCommand({ QueueUrl: dlq, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'], WaitTimeSeconds: 1 })))
        .Messages!;
      assert.deepEqual(
        copies.map((m) => `${m.MessageAttributes?.['idem-key']?.StringValue}:${m.MessageAttributes?.[IDEM_REASON_ATTRIBUTE]?.StringValue}:${m.Body}`).sort(),
        [`${order}:mismatch:{"amount":2}`, `${poison}:max-attempts:poison`].sort(),
      );
      assert.equal(await depth(queueUrl), 0, 'both left the source queue');
      assert.equal((await t.counts()).get(order), 1);
    });

    it('FIFO: one message of a group at a time, in order, a retried one included; groups run side by side', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const queueUrl = await queue(true, { ContentBasedDeduplication: 'true' });
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: queueUrl, retryDelayMs: 0 });
      const order = new Map<string, number[]>();
      const active = new Map<string, number>();
      let overlap = 0;
      let failedOnce = false;
      const acks: Disposition[] = [];
      const c = start(
        new SqsConsumer({
          client: sqs,
          queueUrl,
          consumer,
          waitTimeSeconds: 1,
          concurrency: 10,
          handler: async (ctx) => {
            const { group, n } = JSON.parse(new TextDecoder().decode(ctx.message.body)) as { group: string; n: number };
            active.set(group, (active.get(group) ?? 0) + 1);
            if (active.get(group)! > 1) overlap++;
            try {
              await new Promise((resolve) => setImmediate(resolve));
              if (group === 'a' && n === 2 && !failedOnce) {
                failedOnce = true;
                throw new Error('transient');
              }
              await ctx.complete((tx) => t.insert(tx, ctx.key, `${group}${n}`));
              order.set(group, [...(order.get(group) ?? []), n]);
            } finally {
              active.set(group, active.get(group)! - 1);
            }
          },
          onDisposition: (d) => d.action === 'ack' && acks.push(d),
        }),
      );
      for (let n = 1; n <= 5; n++) {
        for (const group of ['a', 'b']) {
          await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: JSON.stringify({ group, n }), MessageGroupId: group }));
        }
      }
      await until(() => acks.length === 10, 60_000, 'ten acks');
      await c.stop();
      assert.ok(failedOnce);
      assert.equal(overlap, 0, 'no two messages of one group in flight at once');
      assert.deepEqual(order.get('a'), [1, 2, 3, 4, 5]);
      assert.deepEqual(order.get('b'), [1, 2, 3, 4, 5]);
      assert.equal(await depth(queueUrl), 0);
    });

    it('FIFO, several messages of one group in one receive (as SQS returns them; fauxqs returns one): run in order, the rest given back behind a retry', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      // A scripted client: SQS answers a FIFO receive with up to 10 messages of one group, in
      // order (docs/guides/sqs.md, the emulator's gaps); the calls idem makes are recorded.
      const calls: string[] = [];
      let served = false;
      let closed = false;
      const batch = [1, 2, 3].map((n) => ({
        MessageId: `m${n}`,
        ReceiptHandle: `r${n}`,
        Body: String(n),
        Attributes: { ApproximateReceiveCount: '1', MessageGroupId: 'a', SequenceNumber: String(n) },
      }));
      const client: SqsClientLike = {
        async send(command: { constructor: { name: string }; input: { ReceiptHandle?: string; VisibilityTimeout?: number } }) {
          const name = command.constructor.name;
          if (name === 'ReceiveMessageCommand') {
            if (!served) {
              served = true;
              return { Messages: batch };
            }
            await until(() => closed, 60_000, 'the stop');
            return { Messages: [] };
          }
          if (name === 'DeleteMessageCommand') calls.push(`delete ${command.input.ReceiptHandle}`);
          if (name === 'ChangeMessageVisibilityCommand' && command.input.VisibilityTimeout === 0) calls.push(`visible ${command.input.ReceiptHandle}`);
          return {};
        },
      };
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: `fifo-${randomBytes(4).toString('hex')}`, retryDelayMs: 0 });
      const ran: string[] = [];
      let active = 0;
      let overlap = 0;
      const c = new SqsConsumer({
        client,
        queueUrl: 'https://sqs.us-east-1.amazonaws.com/000000000000/orders.fifo',
        consumer,
        concurrency: 10,
        handler: async (ctx) => {
          const n = new TextDecoder().decode(ctx.message.body);
          if (++active > 1) overlap++;
          try {
            ran.push(n);
            await new Promise((resolve) => setImmediate(resolve));
            if (n === '2') throw new Error('transient');
            await ctx.complete((tx) => t.insert(tx, ctx.key));
          } finally {
            active--;
          }
        },
      }).start();
      await until(() => calls.length === 3, 60_000, 'three settlements');
      closed = true;
      await c.stop();
      assert.equal(overlap, 0, 'one message of the group at a time');
      assert.deepEqual(ran, ['1', '2'], 'message 3 never overtook the retried 2');
      assert.deepEqual(calls, ['delete r1', 'visible r2', 'visible r3']);
    });

    it('stop() waits for the message in flight, deletes it after its commit, and receives nothing more', async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const queueUrl = await queue();
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope: queueUrl });
      let entered!: () => void;
      const inHandler = new Promise<void>((resolve) => (entered = resolve));
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const seen: Disposition[] = [];
      const { client, sent, answered } = counting(sqs);
      const c = start(
        new SqsConsumer({
          client,
          queueUrl,
          consumer,
          waitTimeSeconds: 1,
          handler: async (ctx) => {
            entered();
            await gate;
            await ctx.complete((tx) => t.insert(tx, ctx.key));
          },
          onDisposition: (d) => seen.push(d),
        }),
      );
      const id = (await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: 'in flight' }))).MessageId!;
      await inHandler;
      let stopped = false;
      const stopping = c.stop().then(() => {
        stopped = true;
      });
      // The poll under way ends (its wait is 1 s) and no other starts; then stop() waits for the handler.
      const receives = () => sent.get('ReceiveMessageCommand') ?? 0;
      const polled = receives();
      await until(() => (answered.get('ReceiveMessageCommand') ?? 0) === polled, 60_000, 'the poll under way to end');
      for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
      assert.equal(receives(), polled, 'no poll after stop()');
      assert.equal(stopped, false, 'stop() waits for the handler');
      release();
      await stopping;
      assert.deepEqual(seen, [{ action: 'ack', reason: 'processed' }]);
      assert.equal((await t.counts()).get(id), 1);
      assert.equal(await depth(queueUrl), 0, 'deleted before stop() resolved');
      await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: 'after stop' }));
      const left = await sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, WaitTimeSeconds: 1 }));
      assert.equal(left.Messages?.length, 1, 'the stopped consumer took nothing more');
      await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: queueUrl, ReceiptHandle: left.Messages![0]!.ReceiptHandle, VisibilityTimeout: 0 }));
      assert.equal(seen.length, 1);
    });

    it('a consumer process SIGKILLed mid-handler: after the visibility timeout the redelivery takes over, fenced, and resumes once', {
      skip: engine.name !== 'postgres' && 'needs a database shared between processes',
    }, async () => {
      const t = await consumerTables(db.client());
      db.cleanup(t.drop);
      const queueUrl = await queue();
      const scope = `sqs-${randomBytes(4).toString('hex')}`;
      const script = fileURLToPath(new URL('./helpers/sqs-process.ts', import.meta.url));
      const child = spawn(process.execPath, ['--import', 'tsx', script, server.address, queueUrl, t.table, scope], {
        env: process.env,
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      const lines = createInterface({ input: child.stdout! });
      const phase = new Promise<string>((resolve, reject) => {
        child.once('exit', (code) => reject(new Error(`sqs consumer process exited with ${code}`)));
        lines.on('line', (line) => line.startsWith('PHASE ') && resolve(line.slice(6)));
      });
      const id = (await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: 'crash me' }))).MessageId!;
      assert.equal(await phase, id);
      child.kill('SIGKILL');
      await exited;
      const events: IdempotencyEvent[] = [];
      const consumer = new IdempotentConsumer<Queryable>({ store: t.store, scope, onEvent: (e) => events.push(e) });
      const seen: Array<{ d: Disposition; attempt: number | undefined }> = [];
      let resumed = false;
      const c = start(
        new SqsConsumer({
          client: sqs,
          queueUrl,
          consumer,
          visibilityTimeoutSec: 2,
          waitTimeSeconds: 1,
          handler: async (ctx) => {
            resumed = ctx.resumed;
            await ctx.phase('invoice', (tx) => t.insert(tx, ctx.key));
            await ctx.complete((tx) => t.insert(tx, ctx.key, 'event'));
          },
          onDisposition: (d, m) => seen.push({ d, attempt: m.attempt }),
        }),
      );
      await until(() => seen.some((s) => s.d.action === 'ack'), 60_000, 'the ack after the crash');
      await c.stop();
      assert.deepEqual(seen, [{ d: { action: 'ack', reason: 'processed' }, attempt: 2 }], 'redelivered once, after the visibility timeout');
      assert.ok(resumed, 'the redelivery took the key over and resumed from its recovery point');
      const takeover = events.find((e) => e.type === 'taken-over');
      assert.ok(takeover && (takeover.token ?? 0) > 1, 'taken over with a higher fencing token');
      const rows = (await t.sql.query(`SELECT note FROM ${t.table}_effects WHERE message_id = $1 ORDER BY id`, [id])).rows.map((r) => r.note);
      assert.deepEqual(rows, ['invoice', 'event'], 'the invoice ran once');
      assert.equal(await depth(queueUrl), 0);
    });
  });
}
