/**
 * The Lambda-batch path on DynamoDB under crashes (issue 43): rounds of SQS batches, each first
 * delivered to an invocation in its own process that is SIGKILLed at a random record, after that
 * record's effect committed (in one `TransactWriteItems` with its recovery point) and before its
 * key finished; then the batch is redelivered, as SQS does, until it reports no failures. Counted
 * over every round: each message has exactly one effect item (0 duplicates, 0 lost), and the
 * crashed record was resumed after its phase, never run again. DynamoDB Local (the full matrix:
 * it runs on Java); dynalite has no `TransactWriteItems`.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DynamoDbStore } from '../src/dynamodb/index.js';
import { sqsBatch } from '../src/lambda/index.js';
import { sqsEvent } from './helpers/batch-events.js';
import { createKeyTable, type DynamoDbEmulator, dropKeyTable, startDynamoDbLocal } from './helpers/dynamodb.js';
import { scanAll } from './helpers/dynamodb-stores.js';
import { lambdaContext } from './helpers/harness-lambda.js';
import { spawnTs } from './helpers/process.js';
import { fullMatrixOnly } from './helpers/services.js';
import { poll } from './helpers/wait.js';

const ROUNDS = 6;
const SIZE = 5;

describe('Lambda batches on DynamoDB: invocations killed mid-batch', { skip: fullMatrixOnly() }, () => {
  let emulator: DynamoDbEmulator;
  const table = `idem_batch_chaos_${process.pid}`;
  before(async () => {
    emulator = await startDynamoDbLocal();
    await createKeyTable(emulator.client, table);
  });
  after(async () => {
    await dropKeyTable(emulator.client, table);
    await emulator.stop();
  });

  it(`${ROUNDS} rounds of ${SIZE} records, each round's first invocation SIGKILLed at a random record: every message has one effect`, async () => {
    const store = new DynamoDbStore({ client: emulator.client, table, clockSkewMs: 0 });
    const runs: string[] = [];
    const handler = sqsBatch({ store, scope: 'orders' }, async (record, ctx) => {
      runs.push(`${record.messageId}${ctx.resumed ? ' resumed' : ''}`);
      await ctx.phase('effect', async (tx) => {
        tx.write({ Put: { TableName: tx.table, Item: { pk: { S: `effect#parent#${runs.length}` }, sk: { S: 'effect' }, note: { S: record.messageId } } } });
        return record.messageId;
      });
    });
    const crashed: string[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      const prefix = `r${round}`;
      const crashAt = `${prefix}-${1 + Math.floor(Math.random() * SIZE)}`;
      crashed.push(crashAt);
      const child = spawnTs('test/helpers/lambda-batch-dynamodb-process.ts', {
        BATCH_ENDPOINT: emulator.endpoint,
        BATCH_TABLE: table,
        BATCH_PREFIX: prefix,
        BATCH_SIZE: String(SIZE),
        BATCH_CRASH_AT: crashAt,
        BATCH_REMAINING_MS: '1500',
      });
      await child.waitFor(/CRASH_POINT/);
      await child.kill('SIGKILL');
      // SQS redelivers the batch; the crashed record stays held until the dead invocation's
      // lease (its remaining time) ends, and comes back each time until then.
      let delivery = 1;
      await poll(
        async () => {
          const response = await handler(sqsEvent(SIZE, { prefix, receiveCount: ++delivery }), lambdaContext());
          return response.batchItemFailures.length === 0 || undefined;
        },
        30_000,
        `round ${round}'s redelivered batch to finish`,
        200,
      );
    }
    const effects = (await scanAll(emulator.client, table)).filter((i) => (i.sk as { S: string }).S === 'effect').map((i) => (i.note as { S: string }).S);
    const counts = new Map<string, number>();
    for (const note of effects) counts.set(note, (counts.get(note) ?? 0) + 1);
    const expected = Array.from({ length: ROUNDS }, (_, r) => Array.from({ length: SIZE }, (_, i) => `r${r + 1}-${i + 1}`)).flat();
    assert.deepEqual([...counts.keys()].sort(), [...expected].sort(), 'every message has an effect, nothing else does');
    assert.deepEqual(
      [...counts.entries()].filter(([, n]) => n !== 1),
      [],
      '0 duplicate effects',
    );
    for (const id of crashed) assert.ok(runs.includes(`${id} resumed`), `${id} resumed after its committed phase`);
    assert.ok(!runs.some((r) => crashed.includes(r)), 'no crashed record ran its work again from the start');
  });
});
