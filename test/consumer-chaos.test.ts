/**
 * The short consumer chaos run (protocol.md K4, K8, K9 for messages), on real RabbitMQ and
 * PostgreSQL (needs AMQP_URL and DATABASE_URL), through bench/chaos/consumer-harness.ts: 200 messages, each
 * published twice, consumed by three consumer processes that are SIGKILLed mid-message (and kill
 * themselves after a commit, before the ack), one of them frozen (SIGSTOP) past its lease; an
 * outbox relay publishes the events. At the end: exactly one invoice, one PSP charge and one
 * outbox event per message, none lost. The naive consumer (no idem) on the same input shows
 * duplicates.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { runConsumerChaos } from '../bench/chaos/consumer-harness.js';
import { needs } from './helpers/services.js';

const MESSAGES = 200;
const databaseUrl = process.env.DATABASE_URL ?? '';
// DATABASE_URL: the consumer processes share one PostgreSQL.
const skip = needs('DATABASE_URL', 'AMQP_URL');

describe('consumer chaos run on RabbitMQ', { skip }, () => {
  it(`idem: ${MESSAGES} messages × 2 copies, consumers killed, frozen and dropping acks → one invoice, charge and event each`, async () => {
    const r = await runConsumerChaos({ databaseUrl, mode: 'idem', messages: MESSAGES });
    assert.ok(r.finished, 'every message finished within 3 minutes');
    assert.deepEqual(r.invoices, { duplicated: 0, missing: 0 }, 'invoices');
    assert.deepEqual(r.charges, { duplicated: 0, missing: 0 }, 'PSP charges');
    assert.deepEqual(r.outbox, { duplicated: 0, missing: 0 }, 'outbox events');
    assert.ok(r.kills >= 2, `consumers killed: ${r.kills}`);
    assert.equal(r.freezes, 1);
    assert.deepEqual(r.history?.violations, [], 'the history checker (bench/chaos/history.ts)');
    console.log(
      `# consumer chaos: ${MESSAGES} messages ×2, ${r.kills} kills + self-kills after commit, ${r.freezes} freeze, ${r.seconds.toFixed(0)} s; 0 duplicates, 0 lost`,
    );
  });

  it('naive consumer (no idem) on the same input: duplicates', async () => {
    const r = await runConsumerChaos({ databaseUrl, mode: 'naive', messages: MESSAGES });
    assert.ok(r.finished, 'every copy processed');
    assert.ok(r.invoices.duplicated > 0, 'the naive consumer makes duplicate invoices');
    assert.ok(r.charges.duplicated > 0, 'and duplicate charges');
    console.log(`# naive consumer: ${r.invoices.duplicated} of ${MESSAGES} messages with duplicate invoices, ${r.charges.duplicated} with duplicate charges`);
  });
});
