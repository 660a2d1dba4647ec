/**
 * Keys from data (protocol.md K47): `idempotent(fn)`, the Lambda batches, the consumer and the
 * webhook receiver take any non-empty string as a key (`customer#Zoë`, `Straße`, an emoji, a
 * composite key over 255 characters), mapped into the stored keys the same way on every store:
 * memory, PGlite, PostgreSQL, MySQL/MariaDB, Redis, Redis + PostgresPhases (the service stores
 * when their URLs are set). A stream record whose key cannot be formed fails alone. The HTTP
 * header keeps its syntax (test/key-header.test.ts).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import type { DynamoDBStreamEvent } from 'aws-lambda';
import { dataKey, InvalidKeyError } from '../src/core/index.js';
import { idempotent, type FunctionContext } from '../src/function/index.js';
import { type Disposition, dynamoDbBatch, kinesisBatch, sqsBatch } from '../src/lambda/index.js';
import { IdempotentConsumer } from '../src/consumer/index.js';
import { stripe, webhookReceiver } from '../src/webhooks/index.js';
import { PostgresStore } from '../src/postgres/index.js';
import { auditHandlerOn, auditKey } from '../examples/lambda/batch.js';
import { storeFactories, type StoreHarness } from './helpers/stores.js';
import { useWorkStore, workStores } from './helpers/work-stores.js';
import { dynamoDbEvent, kinesisEvent, sqsEvent } from './helpers/batch-events.js';
import { lambdaContext } from './helpers/harness-lambda.js';
import { pglite } from './helpers/pglite.js';

/** The stored key of a key outside 1-255 printable ASCII, computed apart from idem's code. */
const hashed = (key: string) => `sha256:${createHash('sha256').update(key, 'utf8').digest('hex')}`;
const named = (response: { batchItemFailures: Array<{ itemIdentifier: string }> }) => response.batchItemFailures.map((f) => f.itemIdentifier);
const LONG = 'k'.repeat(255);
const COMPOSITE = `tenant#Zoë#${'order-line;'.repeat(26)}end`; // 300 characters

/** A DynamoDB stream batch of items with the given partition keys (`pk`) and sequence numbers 1, 2, … */
function itemsEvent(pks: string[]): DynamoDBStreamEvent {
  const event = dynamoDbEvent(pks.length);
  event.Records.forEach((record, i) => {
    record.dynamodb = { ...record.dynamodb, Keys: { pk: { S: pks[i]! } }, NewImage: { pk: { S: pks[i]! } }, SequenceNumber: String(i + 1) };
  });
  return event;
}

describe('dataKey: any non-empty string into the stored keys (protocol.md K47)', () => {
  it('keeps a key of 1-255 printable ASCII as it is', () => {
    for (const key of ['a', 'order-1', LONG, ' ~!"#', 'sha256:abc']) assert.equal(dataKey(key), key);
  });

  it('maps a longer, non-ASCII or control-character key to sha256: and the hex of its UTF-8 bytes', () => {
    for (const key of ['customer#Zoë', 'Straße', '🧾', `${LONG}x`, COMPOSITE, 'tab\there', 'line\n']) {
      assert.equal(dataKey(key), hashed(key));
      assert.match(dataKey(key), /^sha256:[0-9a-f]{64}$/);
    }
  });

  it('gives two keys sharing their first 255 characters, or differing in a lone surrogate, two stored keys', () => {
    assert.notEqual(dataKey(`${LONG}a`), dataKey(`${LONG}b`));
    // A sliced emoji: UTF-8 would write both as U+FFFD; their WTF-8 bytes differ.
    assert.notEqual(dataKey('cut\ud83d'), dataKey('cut\ud83e'));
    assert.notEqual(dataKey('cut\ud83d'), dataKey('cut\ufffd'));
    assert.equal(dataKey('🧾'), dataKey('\ud83e\uddfe'));
  });

  it('refuses an empty key or a non-string with InvalidKeyError (IDEM_INVALID_KEY)', () => {
    for (const bad of ['', undefined, null, 42, {}]) assert.throws(() => dataKey(bad), InvalidKeyError);
    assert.throws(() => dataKey(''), { code: 'IDEM_INVALID_KEY', message: /empty/ });
    assert.throws(() => dataKey(Promise.resolve('k')), { message: /must be a string, not object/ });
  });
});

describe('the DynamoDB stream guide’s example (examples/lambda/batch.ts) on PGlite', () => {
  it('audits customer#Zoë and a 300-character composite key once each; the redelivered batch replays', async () => {
    const db = pglite();
    try {
      const store = new PostgresStore({ client: db });
      await store.migrate();
      await db.query('CREATE TABLE audit (event text, item text)');
      const handler = auditHandlerOn(store);
      const event = itemsEvent(['customer#Zoë', COMPOSITE]);
      assert.equal(COMPOSITE.length, 300);
      assert.ok(auditKey(event.Records[1]!).length > 300);
      assert.deepEqual(named((await handler(event, lambdaContext() as never, () => undefined)) as never), []);
      assert.deepEqual(named((await handler(event, lambdaContext() as never, () => undefined)) as never), []);
      const rows = await db.query<{ item: string }>('SELECT item FROM audit');
      assert.deepEqual(rows.rows.map((r) => JSON.parse(r.item).pk.S).sort(), [COMPOSITE, 'customer#Zoë'].sort());
      const keys = await db.query<{ key: string }>('SELECT key FROM idempotency_keys');
      assert.deepEqual(keys.rows.map((r) => r.key).sort(), event.Records.map((r) => hashed(auditKey(r))).sort());
    } finally {
      await db.close();
    }
  });
});

/** The adapter matrix's stores (memory, PGlite, PostgreSQL, Redis + PostgresPhases) and the other kinds: Redis alone, MySQL/MariaDB. */
const stores = [...workStores, ...storeFactories.filter((f) => f.name === 'RedisStore on Redis' || f.name.startsWith('MySqlStore on MariaDB'))];

/** `idempotent(fn)` committing one effect per call, keyed by its first argument. */
function recorder(h: StoreHarness) {
  let runs = 0;
  const fn = idempotent(
    async (ctx: FunctionContext<unknown, string>, key: string) => {
      runs++;
      await ctx.phase('effect', h.effect(key));
      return `done ${key}`;
    },
    { store: h.store, name: 'data-keys', key: (key) => key },
  );
  return { fn, runs: () => runs };
}

for (const factory of stores) {
  describe(`keys from data over ${factory.name}`, () => {
    const fresh = useWorkStore(factory);

    it('idempotent(fn) takes Straße and an emoji as keys: each runs once, the retry replays, the stored key is sha256:<hex>', async () => {
      const h = await fresh();
      const { fn, runs } = recorder(h);
      for (const key of ['Straße', '🧾 receipt']) {
        assert.deepEqual(await fn.outcome({}, key), { value: `done ${key}`, replayed: false });
        assert.deepEqual(await fn.outcome({}, key), { value: `done ${key}`, replayed: true });
      }
      assert.equal(runs(), 2);
      assert.deepEqual((await h.effects()).sort(), ['Straße', '🧾 receipt'].sort());
      const stored = (await h.rows()).filter((r) => r.scope === 'data-keys').map((r) => r.key);
      assert.deepEqual(stored.sort(), [hashed('Straße'), hashed('🧾 receipt')].sort());
    });

    it('two 300-character keys sharing their first 255 characters are two keys; the same long key replays on a retry', async () => {
      const h = await fresh();
      const { fn, runs } = recorder(h);
      const a = `${LONG}${'a'.repeat(45)}`;
      const b = `${LONG}${'b'.repeat(45)}`;
      assert.equal((await fn.outcome({}, a)).replayed, false);
      assert.equal((await fn.outcome({}, b)).replayed, false);
      assert.deepEqual(await fn.withKey(a)(a), `done ${a}`);
      assert.equal((await fn.outcome({ key: a }, a)).replayed, true);
      assert.equal(runs(), 2);
      assert.equal((await h.effects()).length, 2);
    });

    it('the DynamoDB guide’s getKey: customer#Zoë and a 300-character composite key each run once; the redelivered batch replays', async () => {
      const h = await fresh();
      const seen: string[] = [];
      const handler = dynamoDbBatch<unknown, DynamoDBStreamEvent>(
        { store: h.store, scope: 'accounts-audit', getKey: auditKey, onRecord: (_r, d) => void seen.push(`${d.action}:${d.reason}`) },
        (record, ctx) => ctx.phase('audited', h.effect(record.dynamodb!.Keys!.pk!.S!)),
      );
      const event = itemsEvent(['customer#Zoë', COMPOSITE]);
      assert.deepEqual(named(await handler(event, lambdaContext())), []);
      assert.deepEqual(named(await handler(event, lambdaContext())), []);
      assert.deepEqual(seen, ['ack:processed', 'ack:processed', 'ack:duplicate', 'ack:duplicate']);
      assert.deepEqual(await h.effects(), ['customer#Zoë', COMPOSITE]);
    });

    it('the consumer takes a message id outside printable ASCII: processed once, then a duplicate; consumeBatch too', async () => {
      const h = await fresh();
      const consumer = new IdempotentConsumer({ store: h.store, scope: 'data-key-queue' });
      const body = new TextEncoder().encode('{"n":1}');
      const run = (id: string) => consumer.consume({ id, body }, (ctx) => ctx.phase('effect', h.effect(id)));
      assert.deepEqual(await run('Zoë'), { action: 'ack', reason: 'processed' });
      assert.deepEqual(await run('Zoë'), { action: 'ack', reason: 'duplicate' });
      const batch = [`${LONG}1`, `${LONG}2`, 'Straße'].map((id) => ({ id, body }));
      const effects = (tx: unknown, m: { id: string }) => h.effect(m.id)(tx as never);
      assert.deepEqual(
        await consumer.consumeBatch(batch, effects),
        batch.map(() => ({ action: 'ack', reason: 'processed' })),
      );
      assert.deepEqual(
        await consumer.consumeBatch(batch, effects),
        batch.map(() => ({ action: 'ack', reason: 'duplicate' })),
      );
      assert.deepEqual((await h.effects()).sort(), ['Zoë', `${LONG}1`, `${LONG}2`, 'Straße'].sort());
    });

    it('a webhook whose delivery id is not ASCII runs once; its redelivery replays; an empty id is a 400 that runs nothing', async () => {
      const h = await fresh();
      const receive = webhookReceiver(stripe({ verify: () => true }), { store: h.store });
      let runs = 0;
      const deliver = () =>
        receive(new Request('http://hooks.test/stripe', { method: 'POST', body: JSON.stringify({ id: 'evt_Zoë_1' }) }), async () => {
          runs++;
          return new Response('ok', { status: 200 });
        });
      const first = await deliver();
      assert.equal(first.status, 200, await first.clone().text());
      const again = await deliver();
      assert.equal(again.status, 200);
      assert.equal(await again.text(), 'ok');
      assert.equal(runs, 1);
      const empty = await receive(new Request('http://hooks.test/stripe', { method: 'POST', body: '{"id":""}' }), async () => assert.fail('ran'));
      assert.equal(empty.status, 400);
      assert.match(((await empty.json()) as { type: string }).type, /idempotency-key-invalid$/);
    });

    it('a stream record whose key cannot be formed fails alone: its neighbours commit and are not named; the retry does not run it', async () => {
      const h = await fresh();
      const seen: Disposition[] = [];
      const handler = kinesisBatch(
        {
          store: h.store,
          scope: 'poison-stream',
          getKey: (record) => (record.kinesis.sequenceNumber === 'seq0002' ? '' : record.eventID),
          onRecord: (_r, d) => void seen.push(d),
        },
        (record, ctx) => ctx.phase('effect', h.effect(record.kinesis.sequenceNumber)),
      );
      assert.deepEqual(named(await handler(kinesisEvent(3), lambdaContext())), []);
      assert.deepEqual(await h.effects(), ['seq0001', 'seq0003']);
      assert.deepEqual(
        seen.map((d) => `${d.action}:${d.reason}`),
        ['ack:processed', 'dead-letter:invalid-message', 'ack:processed'],
      );
      assert.ok(seen[1]!.action === 'dead-letter' && seen[1]!.error instanceof InvalidKeyError);
      // A getKey that throws is the same: the DynamoDB record is skipped, the others run.
      const table = dynamoDbBatch(
        {
          store: h.store,
          scope: 'poison-table',
          getKey: (record) => {
            if (record.eventID === 'ev-1') throw new TypeError('no business id');
            return record.eventID!;
          },
        },
        (record, ctx) => ctx.phase('effect', h.effect(record.eventID!)),
      );
      assert.deepEqual(named(await table(dynamoDbEvent(2), lambdaContext())), []);
      assert.deepEqual(await h.effects(), ['seq0001', 'seq0003', 'ev-2']);
    });

    it('onInvalidKey keeps the poison record (awaited); when it throws, the record is named as any failure', async () => {
      const h = await fresh();
      const kept: Array<[string, unknown]> = [];
      let refuse = true;
      const handler = kinesisBatch(
        {
          store: h.store,
          scope: 'poison-kept',
          getKey: (record) => (record.kinesis.sequenceNumber === 'seq0002' ? (undefined as never) : record.eventID),
          onInvalidKey: async (record, error) => {
            if (refuse) throw new Error('the dead-letter table is down');
            kept.push([record.kinesis.sequenceNumber, error]);
          },
        },
        (record, ctx) => ctx.phase('effect', h.effect(record.kinesis.sequenceNumber)),
      );
      assert.deepEqual(named(await handler(kinesisEvent(3), lambdaContext())), ['seq0002', 'seq0003']);
      refuse = false;
      assert.deepEqual(named(await handler(kinesisEvent(3), lambdaContext())), []);
      assert.deepEqual(await h.effects(), ['seq0001', 'seq0003']);
      assert.equal(kept.length, 1);
      assert.equal(kept[0]![0], 'seq0002');
      assert.ok(kept[0]![1] instanceof InvalidKeyError);
    });

    it('SQS FIFO: a message whose key cannot be formed is named alone; the rest of its group goes on', async () => {
      const h = await fresh();
      const handler = sqsBatch(
        { store: h.store, scope: 'poison.fifo', getKey: (record) => (record.messageId === 'msg-1' ? '' : record.messageId) },
        (record, ctx) => ctx.phase('effect', h.effect(record.messageId)),
      );
      assert.deepEqual(named(await handler(sqsEvent(3, { groups: ['A', 'A', 'A'] }), lambdaContext())), ['msg-1']);
      assert.deepEqual(await h.effects(), ['msg-2', 'msg-3']);
    });
  });
}
