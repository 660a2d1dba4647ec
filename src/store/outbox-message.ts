/**
 * What a store's outbox (protocol.md K18, outgoing messages: `Outbox`, `OutboxRelay` in
 * idem/postgres) hands a broker: the message and the function that publishes it. Broker-free,
 * so the store keeping the rows and the broker adapters publishing them (idem/amqp, idem/nats)
 * share it from below both.
 */

/** A message to publish (an outbox row): broker-free. */
export interface OutgoingMessage {
  /** The message id, stable across the relay's repeats: downstream dedup keys on it. */
  id: string;
  /** Where it goes: a routing key on RabbitMQ, a subject on NATS. */
  destination: string;
  /** The payload bytes. */
  body: Uint8Array;
  /** The payload's content type, or `null`. */
  contentType: string | null;
}

/** Publishes one message and resolves once the broker confirmed it (a publisher confirm, a JetStream ack). */
export type Publisher = (message: OutgoingMessage) => Promise<void>;
