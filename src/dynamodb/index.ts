/**
 * `idem/dynamodb`: the idempotency store on Amazon DynamoDB (`@aws-sdk/client-dynamodb` v3, an
 * optional peer), protocol.md K53. Claims are conditional writes, every later write is fenced by
 * the token, a phase's effects commit in one `TransactWriteItems` with its recovery point.
 */
export { DynamoDbStore, type DynamoDbStoreOptions, type DynamoDbTx } from './store.js';
export type { AttributeValue, DynamoDbClientLike, Item, TransactWriteItem } from './client.js';
