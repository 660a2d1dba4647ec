/**
 * `idem/consumer`: exactly-once effects for at-least-once queue consumers, with no broker in
 * it. {@link IdempotentConsumer} turns one delivery into a {@link Disposition} (ack, retry,
 * dead-letter); `idem/amqp` and `idem/nats` carry it out on RabbitMQ and NATS JetStream.
 */
export { IdempotentConsumer, type ConsumerOptions, type MessageEffects, type MessageHandler } from './consumer.js';
export { MessageContext } from './context.js';
export type { AckReason, ConsumedMessage, DeadLetterReason, Disposition, OutgoingMessage, Publisher, RetryReason } from './types.js';
