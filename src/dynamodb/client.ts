/**
 * The slice of `@aws-sdk/client-dynamodb` the DynamoDB store uses (protocol.md K53): the user's
 * `DynamoDBClient` (anything with its `send`), and the attribute-value and transaction shapes,
 * declared here so that idem's types never name the SDK. The command classes come from the
 * optional peer `@aws-sdk/client-dynamodb`, imported by this subpath only (`idem/dynamodb`).
 */

/** One DynamoDB attribute value, as the low-level client writes it. */
export type AttributeValue =
  | { S: string }
  | { N: string }
  | { B: Uint8Array }
  | { BOOL: boolean }
  | { NULL: true }
  | { L: AttributeValue[] }
  | { M: Record<string, AttributeValue> }
  | { SS: string[] };

/** An item: attribute name to value. */
export type Item = Record<string, AttributeValue>;

/**
 * One write of a `TransactWriteItems` request (a phase's effect, protocol.md K53 3): a
 * `Put`, `Update`, `Delete` or `ConditionCheck` with `TableName`, as the SDK's
 * `TransactWriteItem` (its optional fields are passed through as given).
 */
export interface TransactWriteItem {
  Put?: { TableName: string; Item: Item; ConditionExpression?: string; [more: string]: unknown };
  Update?: { TableName: string; Key: Item; UpdateExpression: string; ConditionExpression?: string; [more: string]: unknown };
  Delete?: { TableName: string; Key: Item; ConditionExpression?: string; [more: string]: unknown };
  ConditionCheck?: { TableName: string; Key: Item; ConditionExpression: string; [more: string]: unknown };
}

/** The client: `DynamoDBClient` from `@aws-sdk/client-dynamodb` (v3), or anything with its `send`. */
export interface DynamoDbClientLike {
  // biome-ignore lint/suspicious/noExplicitAny: the SDK's `send` is overloaded per command; only the call shape matters here
  send(command: any, options?: { abortSignal?: AbortSignal }): Promise<any>;
}

import { StoreUnavailableError } from '../core/errors.js';

/** The error name DynamoDB gives a failed `ConditionExpression`. */
export const CONDITION_FAILED = 'ConditionalCheckFailedException';
/** The error name of a cancelled `TransactWriteItems` (its `CancellationReasons` say which item). */
export const TRANSACTION_CANCELED = 'TransactionCanceledException';

/** Whether `error` is DynamoDB's refusal of a `ConditionExpression`. */
export function conditionFailed(error: unknown): boolean {
  return (error as { name?: string } | null)?.name === CONDITION_FAILED;
}

/**
 * DynamoDB's answers that a later attempt can outgrow (protocol.md K46): throttling, capacity,
 * a service fault, a transaction that met another one on the same item.
 */
const TRANSIENT = new Set([
  'ProvisionedThroughputExceededException',
  'ThrottlingException',
  'RequestLimitExceeded',
  'InternalServerError',
  'ServiceUnavailable',
  'TransactionConflictException',
  'TransactionInProgressException',
]);

/** Whether a DynamoDB error is the service's, not the request's: throttled, a fault, or a cancellation for a conflict. */
function transient(error: unknown): boolean {
  const e = error as { name?: string; $fault?: string; CancellationReasons?: Array<{ Code?: string }> } | null;
  if (!e || typeof e !== 'object') return false;
  if (e.name === TRANSACTION_CANCELED) return (e.CancellationReasons ?? []).some((r) => r.Code === 'TransactionConflict' || r.Code === 'ThrottlingError');
  return (e.name !== undefined && TRANSIENT.has(e.name)) || e.$fault === 'server';
}

/**
 * Sends one command. A refusal the service would lift (throttling, a fault, a conflict) becomes a
 * `StoreUnavailableError` (retryable: the attempt is not counted, HTTP 503); anything else, a
 * refused condition included, is thrown as the SDK threw it.
 */
export async function send<T = unknown>(client: DynamoDbClientLike, command: unknown): Promise<T> {
  try {
    return (await client.send(command)) as T;
  } catch (error) {
    if (transient(error)) throw new StoreUnavailableError(`idem/dynamodb: ${(error as Error).name}: ${(error as Error).message}`, { cause: error });
    throw error;
  }
}
