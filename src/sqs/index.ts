/**
 * `idem/sqs`: an Amazon SQS consumer outside Lambda (ECS, EKS, a VM) on `@aws-sdk/client-sqs`
 * (v3, an optional peer). {@link SqsConsumer} long-polls a queue and settles each message
 * through an `IdempotentConsumer` (from `idem/consumer`): `DeleteMessage` after the key's finish
 * committed, `ChangeMessageVisibility` for a retry, a copy to the dead-letter queue for a dead
 * letter (protocol.md K56).
 */
export { consumeSqs, IDEM_REASON_ATTRIBUTE, SqsConsumer, type SqsConsumeOptions } from './consume.js';
export type { SqsClientLike, SqsMessageAttributeLike, SqsMessageLike } from './types.js';
