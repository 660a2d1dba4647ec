/**
 * The slice of `@aws-sdk/client-sqs` (v3) that idem/sqs uses, declared locally so that idem's
 * types never name the SDK: the user's `SQSClient` (anything with its `send`) and the received
 * message's shape. The command classes come from the optional peer `@aws-sdk/client-sqs`,
 * imported by this subpath only (`idem/sqs`).
 */

/** One message attribute, as `ReceiveMessage` returns it. */
export interface SqsMessageAttributeLike {
  DataType?: string | undefined;
  StringValue?: string | undefined;
  BinaryValue?: Uint8Array | undefined;
}

/** A received message (`Message` of `@aws-sdk/client-sqs`). */
export interface SqsMessageLike {
  MessageId?: string | undefined;
  ReceiptHandle?: string | undefined;
  Body?: string | undefined;
  /** The system attributes: `ApproximateReceiveCount`, and on a FIFO queue `MessageGroupId`, `MessageDeduplicationId`, `SequenceNumber`. */
  Attributes?: Partial<Record<string, string>> | undefined;
  MessageAttributes?: Record<string, SqsMessageAttributeLike> | undefined;
}

/** The client: `SQSClient` from `@aws-sdk/client-sqs` (v3), or anything with its `send`. */
export interface SqsClientLike {
  // biome-ignore lint/suspicious/noExplicitAny: the SDK's `send` is overloaded per command; only the call shape matters here
  send(command: any, options?: { abortSignal?: AbortSignal }): Promise<any>;
}
