/**
 * `idem/amqp`: RabbitMQ (amqplib) for idem's queue consumer. {@link consumeAmqp} consumes a
 * queue with manual acks through an `IdempotentConsumer` (from `idem/consumer`);
 * {@link amqpPublisher} publishes outbox messages with publisher confirms. amqplib is an optional
 * peer: pass your own confirm channel.
 */
export { consumeAmqp, toConsumed, ATTEMPT_HEADER, GIVEN_BACK_HEADER, REASON_HEADER, type AmqpConsumeOptions, type AmqpConsumer } from './consume.js';
export { amqpPublisher } from './publish.js';
export type { AmqpConfirmChannelLike, AmqpMessageLike, AmqpPublishOptions } from './types.js';
