/**
 * examples/dynamodb/handler.ts run on an emulator with transactions (DynamoDB Local): the same
 * request twice is one charge and a replay; 8 concurrent duplicates make one charge item.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { CreateTableCommand, ScanCommand } from '@aws-sdk/client-dynamodb';
import type { APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { chargeHandler } from '../../examples/dynamodb/handler.js';
import { DynamoDbStore } from '../../src/dynamodb/index.js';
import { tableName } from './engines.js';
import { createKeyTable, type DynamoDbEmulator } from './dynamodb.js';
import { lambdaContext, toEvent } from './harness-lambda.js';

/** Registers the example's cases; call inside a `describe`. */
export function dynamoDbExampleCases(start: () => Promise<DynamoDbEmulator>): void {
  let emulator: DynamoDbEmulator;
  before(async () => {
    emulator = await start();
  });
  after(async () => {
    await emulator.stop();
  });

  it('examples/dynamodb/handler.ts: one charge item per key, written with the recovery point; retries replay it', async () => {
    const keys = tableName();
    const charges = tableName('charges');
    await createKeyTable(emulator.client, keys);
    await emulator.client.send(
      new CreateTableCommand({
        TableName: charges,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
        KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
      }),
    );
    const handler = chargeHandler(new DynamoDbStore({ client: emulator.client, table: keys }), charges);
    const call = async (key: string, amount: number) => {
      const request = new Request('https://api.example/v1/charges', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ amount }),
      });
      return (await handler(await toEvent('http v2', request), lambdaContext())) as APIGatewayProxyStructuredResultV2;
    };
    const first = await call('k-1', 500);
    assert.equal(first.statusCode, 201);
    const again = await call('k-1', 500);
    assert.equal(again.body, first.body, 'the replay is the first response');
    assert.equal((await call('k-1', 999)).statusCode, 422, 'another body with the same key');
    const racing = await Promise.all(Array.from({ length: 8 }, () => call('k-2', 700)));
    assert.ok(racing.some((r) => r.statusCode === 201));
    const items = (await emulator.client.send(new ScanCommand({ TableName: charges, ConsistentRead: true }))).Items ?? [];
    assert.equal(items.length, 2, 'one charge per key');
  });
}
