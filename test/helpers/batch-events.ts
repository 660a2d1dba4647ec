/**
 * Batch events for idem/lambda's batch handlers, built from the AWS documentation's example
 * events (test/fixtures/lambda/sqs.json, sqs-fifo.json, kinesis.json, dynamodb.json): `n`
 * copies of the fixture's first record, each with its own id, sequence number and payload.
 */
import { readFileSync } from 'node:fs';
import type { DynamoDBStreamEvent, KinesisStreamEvent, SQSEvent } from 'aws-lambda';

function fixture<T>(file: string): T {
  return JSON.parse(readFileSync(new URL(`../fixtures/lambda/${file}`, import.meta.url), 'utf8')) as T;
}

/** A standard-queue batch; record i's body is `order <i>`. `groups` makes it a FIFO batch (record i in groups[i]). */
export function sqsEvent(n: number, options: { prefix?: string; groups?: string[]; receiveCount?: number } = {}): SQSEvent {
  const base = fixture<SQSEvent>(options.groups ? 'sqs-fifo.json' : 'sqs.json').Records[0]!;
  const prefix = options.prefix ?? 'msg';
  return {
    Records: Array.from({ length: n }, (_, i) => ({
      ...base,
      messageId: `${prefix}-${i + 1}`,
      body: JSON.stringify({ order: i + 1 }),
      attributes: {
        ...base.attributes,
        ApproximateReceiveCount: String(options.receiveCount ?? 1),
        ...(options.groups && { MessageGroupId: options.groups[i]!, MessageDeduplicationId: `${prefix}-${i + 1}` }),
      },
    })),
  };
}

/** A Kinesis batch of one shard: record i's data is `order <i>` (base64), sequence numbers ascending. */
export function kinesisEvent(n: number, prefix = 'seq'): KinesisStreamEvent {
  const base = fixture<KinesisStreamEvent>('kinesis.json').Records[0]!;
  return {
    Records: Array.from({ length: n }, (_, i) => {
      const sequenceNumber = `${prefix}${String(i + 1).padStart(4, '0')}`;
      return {
        ...base,
        eventID: `shardId-000000000006:${sequenceNumber}`,
        kinesis: { ...base.kinesis, sequenceNumber, data: Buffer.from(`order ${i + 1}`).toString('base64') },
      };
    }),
  };
}

/** A DynamoDB stream batch: record i an INSERT of item i. */
export function dynamoDbEvent(n: number, prefix = 'ev'): DynamoDBStreamEvent {
  const base = fixture<DynamoDBStreamEvent>('dynamodb.json').Records[0]!;
  return {
    Records: Array.from({ length: n }, (_, i) => ({
      ...base,
      eventID: `${prefix}-${i + 1}`,
      dynamodb: { ...base.dynamodb, SequenceNumber: String(111 * (i + 1)), Keys: { Id: { N: String(i + 1) } }, NewImage: { Id: { N: String(i + 1) } } },
    })),
  };
}
