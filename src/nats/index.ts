/**
 * `idem/nats`: NATS JetStream for idem's queue consumer. {@link consumeJetStream} settles each
 * message through an `IdempotentConsumer` (from `idem/consumer`) with ack / nak(delay) / term;
 * {@link jetStreamPublisher} publishes outbox messages with `Nats-Msg-Id`. The NATS client is an
 * optional peer: pass your own consumer's messages and JetStream client.
 */
export { consumeJetStream, jetStreamPublisher, type JetStreamConsumeOptions } from './consume.js';
export type { JetStreamPublisherLike, JsMsgLike } from './types.js';
