/** The options of `DynamoDbStore` and the transaction handle a phase's effects get. */
import type { DynamoDbClientLike, TransactWriteItem } from './client.js';

/** Options of `DynamoDbStore`. */
export interface DynamoDbStoreOptions {
  /** A `DynamoDBClient` from `@aws-sdk/client-dynamodb` (v3). */
  client: DynamoDbClientLike;
  /** The table: partition key `pk` (S), sort key `sk` (S), TTL on `exp` (docs/guides/dynamodb.md). */
  table: string;
  /**
   * The most two app hosts' wall clocks may differ, in ms (protocol.md K53 2): an unreleased
   * lease counts as over for a takeover only this long after its end, and the retention left
   * reported to the replay cache is this much shorter. `0` only where one clock writes every
   * lease (one process, tests).
   * @default 1000
   */
  clockSkewMs?: number;
  /**
   * A response body longer than this many bytes is stored as chunk items beside the key item
   * (protocol.md K53 4): a DynamoDB item holds at most 400 KB. At most 350 000.
   * @default 300000
   */
  inlineMaxBytes?: number;
  /**
   * The clock, epoch ms, for leases, retention and tokens. Tests move it.
   * @default Date.now
   */
  clock?: () => number;
}

/**
 * The transaction handle a {@link DynamoDbStore} phase's effects get (protocol.md K53 3): the
 * effects add their writes with {@link DynamoDbTx.write}, and the store sends them in ONE
 * `TransactWriteItems` with the phase's fenced recovery point (or the finish), so both commit
 * or neither does. A fenced commit or a refused condition of one's own leaves nothing. At most
 * 99 writes (DynamoDB's 100 per transaction, one kept for the key item).
 */
export interface DynamoDbTx {
  /** Adds one write to the commit's transaction; nothing is sent until the effects return. */
  write(item: TransactWriteItem): void;
  /** The table of the store, for writes that live beside the keys. */
  readonly table: string;
}
