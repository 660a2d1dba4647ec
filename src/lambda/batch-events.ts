/**
 * The batch events Lambda hands a function for SQS queues (standard and FIFO), Kinesis streams
 * and DynamoDB streams, as far as idem reads them, and where each keeps its id, payload, order
 * and the identifier a partial batch response names. Structural slices: aws-lambda's own types
 * (`SQSEvent`, `KinesisStreamEvent`, `DynamoDBStreamEvent`) fit them.
 */
import { ErrorCode, IdempotencyError } from '../core/errors.js';

/**
 * A batch event with no list of records (`Records` not an array): nothing can be named in a
 * partial batch response, so the invocation fails and Lambda retries the whole batch. A
 * malformed record is not this error: it fails alone, named in `batchItemFailures`.
 */
export class InvalidEventError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.InvalidEvent, message);
  }
}

/** An SQS record (standard or FIFO queue). */
export interface SqsRecordLike {
  messageId: string;
  body: string;
  attributes?: { ApproximateReceiveCount?: string; MessageGroupId?: string };
  eventSourceARN?: string;
}
export interface SqsEventLike {
  Records: SqsRecordLike[];
}

/** A Kinesis stream record (`data` is base64). */
export interface KinesisRecordLike {
  eventID: string;
  kinesis: { data: string; sequenceNumber: string; partitionKey?: string };
}
export interface KinesisEventLike {
  Records: KinesisRecordLike[];
}

/** A DynamoDB stream record. */
export interface DynamoDbRecordLike {
  eventID?: string;
  eventName?: string;
  dynamodb?: { SequenceNumber?: string; Keys?: unknown; NewImage?: unknown; OldImage?: unknown };
}
export interface DynamoDbEventLike {
  Records: DynamoDbRecordLike[];
}

/** The partial batch response (`ReportBatchItemFailures`): the records Lambda must deliver again. */
export interface BatchResponse {
  batchItemFailures: Array<{ itemIdentifier: string }>;
}

/** Where a kind of record keeps what idem needs. */
export interface RecordSource<Rec> {
  /** The default key: the message id or the event id. */
  key(record: Rec): string;
  /** What the partial batch response names: the message id, or the sequence number on streams. */
  itemIdentifier(record: Rec): string;
  /** The payload, fingerprinted: the same key with another payload is never processed. */
  payload(record: Rec): { body: Uint8Array; contentType: string | null };
  /** The delivery number, where the source counts it (SQS's ApproximateReceiveCount). */
  attempt(record: Rec): number | undefined;
  /**
   * The record's ordering group: a failed record stops the rest of its group (a FIFO message
   * group; the whole shard on a stream). `undefined`: unordered (a standard queue).
   */
  group(record: Rec): string | undefined;
  /**
   * Whether a named record leaves on its own when it keeps failing: an SQS queue's redrive
   * policy moves it to the dead-letter queue. False on a stream, where Lambda retries from a
   * named record, in order, until the mapping's retry settings let it go.
   */
  redrives: boolean;
}

const text = new TextEncoder();
/** The one group of a stream batch: Lambda delivers one shard's records in order. */
const SHARD = 'shard';

export const sqsSource: RecordSource<SqsRecordLike> = {
  key: (r) => r.messageId,
  itemIdentifier: (r) => r.messageId,
  payload: (r) => ({ body: text.encode(r.body ?? ''), contentType: null }),
  attempt: (r) => {
    const n = Number(r.attributes?.ApproximateReceiveCount);
    return Number.isInteger(n) && n > 0 ? n : undefined;
  },
  group: (r) => r.attributes?.MessageGroupId,
  redrives: true,
};

export const kinesisSource: RecordSource<KinesisRecordLike> = {
  key: (r) => r.eventID,
  itemIdentifier: (r) => r.kinesis.sequenceNumber,
  payload: (r) => ({ body: new Uint8Array(Buffer.from(r.kinesis.data ?? '', 'base64')), contentType: null }),
  attempt: () => undefined,
  group: () => SHARD,
  redrives: false,
};

export const dynamoDbSource: RecordSource<DynamoDbRecordLike> = {
  key: (r) => r.eventID ?? '',
  itemIdentifier: (r) => r.dynamodb?.SequenceNumber ?? '',
  payload: (r) => ({
    body: text.encode(JSON.stringify({ eventName: r.eventName, keys: r.dynamodb?.Keys, newImage: r.dynamodb?.NewImage, oldImage: r.dynamodb?.OldImage })),
    contentType: 'application/json',
  }),
  attempt: () => undefined,
  group: () => SHARD,
  redrives: false,
};
