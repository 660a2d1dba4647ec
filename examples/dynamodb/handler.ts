/**
 * AWS Lambda on DynamoDB: a charge created once per Idempotency-Key, with the keys in a DynamoDB
 * table (`idem/dynamodb`) and the charge item written in the same `TransactWriteItems` as idem's
 * recovery point; run by test/dynamodb-store.test.ts on DynamoDB Local. Both tables are
 * infrastructure: create them at deploy time (docs/guides/dynamodb.md has the key table).
 */
// #region handler
import { randomUUID } from 'node:crypto';
import type { APIGatewayProxyHandlerV2 } from 'aws-lambda';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoDbStore, type DynamoDbTx } from 'idem/dynamodb';
import { withIdempotency } from 'idem/lambda';

/** The handler for a store and the charges table. */
export function chargeHandler(store: DynamoDbStore, charges: string) {
  return withIdempotency<DynamoDbTx>({ store, required: true }, async (event, _context, idem) => {
    const { amount } = JSON.parse(event.body ?? '{}') as { amount?: unknown };
    // A 4xx before any phase is not stored: the client can fix the body and retry with the same key.
    if (!Number.isInteger(amount)) return { statusCode: 400, body: JSON.stringify({ error: 'amount must be an integer' }) };
    const charge = await idem!.phase('charge_created', async (tx) => {
      const id = `ch_${randomUUID()}`;
      // Sent with the recovery point in ONE TransactWriteItems: both or neither.
      tx.write({ Put: { TableName: charges, Item: { id: { S: id }, amount: { N: String(amount) } }, ConditionExpression: 'attribute_not_exists(id)' } });
      return { id, amount };
    });
    return { statusCode: 201, headers: { 'content-type': 'application/json' }, body: JSON.stringify(charge) };
  });
}

// Module scope: one client per execution environment, reused by warm invocations.
const store = new DynamoDbStore({ client: new DynamoDBClient({}), table: process.env.IDEM_TABLE ?? 'idempotency_keys' });
export const handler: APIGatewayProxyHandlerV2 = chargeHandler(store, process.env.CHARGES_TABLE ?? 'charges');
// #endregion handler
