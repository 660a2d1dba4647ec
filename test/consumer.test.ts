/**
 * The broker-free consumer (idem/consumer) on a real store (PGlite always, PostgreSQL when
 * DATABASE_URL is set): one delivery → one disposition; effects once per message id.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { engines, freshStore, tableName, useEngine } from './helpers/engines.js';
import { IdempotentConsumer } from '../src/consumer/index.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { Queryable } from '../src/postgres/client.js';

const json = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

for (const engine of engines) {
  describe(`IdempotentConsumer on ${engine.name}`, () => {
    const db = useEngine(engine);

    async function setup(options: { leaseMs?: number; heartbeatMs?: number; maxAttempts?: number } = {}) {
      const { store, table, drop } = await freshStore(db.client());
      db.cleanup(drop);
      const effects = `${table}_effects`;
      const sql = db.client() as Queryable;
      await sql.query(`CREATE TABLE ${effects} (id bigserial PRIMARY KEY, message_id text NOT NULL, note text)`);
      db.cleanup(async () => void (await sql.query(`DROP TABLE IF EXISTS ${effects}`)));
      const consumer = new IdempotentConsumer<Queryable>({ store, scope: 'orders', retryDelayMs: 10, ...options });
      const count = async (id: string) => Number((await sql.query(`SELECT count(*)::int AS n FROM ${effects} WHERE message_id = $1`, [id])).rows[0]!.n);
      const insert = (tx: Queryable, id: string, note = 'x') => tx.query(`INSERT INTO ${effects} (message_id, note) VALUES ($1, $2)`, [id, note]);
      return { store, consumer, count, insert, sql };
    }

    it('acks after the commit, and acks a redelivery as a duplicate without running the handler (protocol.md K3, K5)', async () => {
      const { consumer, count, insert } = await setup();
      const id = randomUUID();
      let runs = 0;
      const handler = async (ctx: { phase: (n: string, fn: (tx: Queryable) => Promise<unknown>) => Promise<unknown> }) => {
        runs++;
        await ctx.phase('effect', (tx) => insert(tx, id));
      };
      assert.deepEqual(await consumer.consume({ id, body: json({ order: 1 }) }, handler), { action: 'ack', reason: 'processed' });
      assert.deepEqual(await consumer.consume({ id, body: json({ order: 1 }), attempt: 2 }, handler), { action: 'ack', reason: 'duplicate' });
      assert.equal(runs, 1);
      assert.equal(await count(id), 1);
    });

    it('compares JSON payloads canonically: reordered keys are the same message (protocol.md K2)', async () => {
      const { consumer } = await setup();
      const id = randomUUID();
      const body = new TextEncoder().encode('{"a":1,"b":2}');
      const same = new TextEncoder().encode('{"b":2, "a":1}');
      await consumer.consume({ id, body, contentType: 'application/json' }, async () => {});
      const again = await consumer.consume({ id, body: same, contentType: 'application/json' }, async () => assert.fail('ran twice'));
      assert.deepEqual(again, { action: 'ack', reason: 'duplicate' });
    });

    it('dead-letters the same id with another payload and never runs it', async () => {
      const { consumer, count, insert } = await setup();
      const id = randomUUID();
      await consumer.consume({ id, body: json({ amount: 1 }) }, (ctx) => ctx.phase('effect', (tx) => insert(tx, id)));
      let ran = false;
      const other = await consumer.consume({ id, body: json({ amount: 2 }) }, async () => {
        ran = true;
      });
      assert.deepEqual(other, { action: 'dead-letter', reason: 'mismatch' });
      assert.equal(ran, false);
      assert.equal(await count(id), 1);
    });

    it('retries a failed handler with its delay, keeps the committed phase and resumes after it (protocol.md K10)', async () => {
      const { consumer, count, insert } = await setup();
      const id = randomUUID();
      const body = json({ order: 2 });
      let calls = 0;
      const handler = async (ctx: Parameters<Parameters<typeof consumer.consume>[1]>[0]) => {
        await ctx.phase('invoice', (tx) => insert(tx, id, 'invoice'));
        calls++;
        if (calls === 1) throw new Error('psp down');
        await ctx.complete((tx) => insert(tx, id, 'event'));
      };
      const first = await consumer.consume({ id, body, attempt: 1 }, handler);
      assert.equal(first.action, 'retry');
      assert.equal(first.action === 'retry' && first.reason, 'handler-failed');
      assert.equal(first.action === 'retry' && first.delayMs, 10);
      assert.equal(await count(id), 1, 'the invoice phase committed');
      const second = await consumer.consume({ id, body, attempt: 2 }, handler);
      assert.deepEqual(second, { action: 'ack', reason: 'processed' });
      assert.equal(await count(id), 2, 'one invoice and one event: the invoice phase was skipped on resume');
    });

    it("rolls back complete()'s effects when it throws, and does not ack", async () => {
      const { consumer, count, insert } = await setup();
      const id = randomUUID();
      const result = await consumer.consume({ id, body: json(1) }, (ctx) =>
        ctx.complete(async (tx) => {
          await insert(tx, id);
          throw new Error('after the insert');
        }),
      );
      assert.equal(result.action, 'retry');
      assert.equal(await count(id), 0);
    });

    it("dead-letters after maxAttempts failed deliveries, counted from the broker's attempt", async () => {
      const { consumer } = await setup({ maxAttempts: 3 });
      const id = randomUUID();
      const failing = async () => {
        throw new Error('always');
      };
      for (const attempt of [1, 2]) {
        const d = await consumer.consume({ id, body: json(1), attempt }, failing);
        assert.equal(d.action, 'retry', `attempt ${attempt}`);
      }
      const last = await consumer.consume({ id, body: json(1), attempt: 3 }, failing);
      assert.equal(last.action, 'dead-letter');
      assert.equal(last.action === 'dead-letter' && last.reason, 'max-attempts');
      assert.equal(last.action === 'dead-letter' && (last.error as Error).message, 'always');
    });

    it('retries, never acks, a delivery whose key another consumer is working on (protocol.md K7)', async () => {
      const { consumer } = await setup();
      const id = randomUUID();
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      let started!: () => void;
      const running = new Promise<void>((resolve) => (started = resolve));
      const first = consumer.consume({ id, body: json(1) }, async () => {
        started();
        await gate;
      });
      await running;
      const second = await consumer.consume({ id, body: json(1), attempt: 2 }, async () => assert.fail('ran concurrently'));
      assert.equal(second.action, 'retry');
      assert.equal(second.action === 'retry' && second.reason, 'in-progress');
      assert.ok(second.action === 'retry' && second.delayMs > 0 && second.delayMs <= 60_000);
      release();
      assert.deepEqual(await first, { action: 'ack', reason: 'processed' });
    });

    it('retries, never acks, when the store fails (protocol.md H17)', async () => {
      const store = new PostgresStore({ client: db.client(), table: tableName('idem_missing') }); // never migrated
      const consumer = new IdempotentConsumer({ store, scope: 'orders', retryDelayMs: 7 });
      let ran = false;
      const d = await consumer.consume({ id: randomUUID(), body: json(1) }, async () => {
        ran = true;
      });
      assert.equal(d.action, 'retry');
      assert.equal(d.action === 'retry' && d.reason, 'store-unavailable');
      assert.equal(d.action === 'retry' && d.delayMs, 7);
      assert.equal(ran, false);
    });

    it('a consumer frozen past its lease gets lease-lost, not ack, and its late effects roll back (protocol.md K8)', async () => {
      const { consumer, store, count, insert } = await setup({ leaseMs: 300, heartbeatMs: 0 });
      const id = randomUUID();
      const body = json(1);
      let resume!: () => void;
      const frozen = new Promise<void>((resolve) => (resume = resolve));
      let claimed!: () => void;
      const hasClaim = new Promise<void>((resolve) => (claimed = resolve));
      const slow = consumer.consume({ id, body }, async (ctx) => {
        claimed();
        await frozen;
        await ctx.phase('effect', (tx) => insert(tx, id, 'late'));
      });
      await hasClaim;
      const other = new IdempotentConsumer<Queryable>({ store, scope: 'orders', leaseMs: 300, heartbeatMs: 0 });
      let second: Awaited<ReturnType<typeof other.consume>>;
      for (;;) {
        second = await other.consume({ id, body, attempt: 2 }, (ctx) => ctx.phase('effect', (tx) => insert(tx, id, 'takeover')));
        if (second.action !== 'retry') break;
        await new Promise((r) => setTimeout(r, second.action === 'retry' ? second.delayMs : 0));
      }
      assert.deepEqual(second, { action: 'ack', reason: 'processed' });
      resume();
      const late = await slow;
      assert.equal(late.action, 'retry');
      assert.equal(late.action === 'retry' && late.reason, 'lease-lost');
      assert.equal(await count(id), 1);
    });

    it('dead-letters a message whose id is not a valid key', async () => {
      const { consumer } = await setup();
      const d = await consumer.consume({ id: '', body: json(1) }, async () => assert.fail('ran'));
      assert.equal(d.action, 'dead-letter');
      assert.equal(d.action === 'dead-letter' && d.reason, 'invalid-message');
      const notBytes = await consumer.consume({ id: 'x', body: 'text' as unknown as Uint8Array }, async () => assert.fail('ran'));
      assert.equal(notBytes.action === 'dead-letter' && notBytes.reason, 'invalid-message');
    });
  });
}
