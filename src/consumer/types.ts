/** A message as a broker adapter hands it to {@link IdempotentConsumer.consume}. */
export interface ConsumedMessage {
  /**
   * The message id: the idempotency key, any non-empty string (one outside 1-255 printable ASCII
   * is stored as `sha256:<hex>` of it, protocol.md K47). Stable across
   * redeliveries and publisher retries (AMQP `message-id`, JetStream `Nats-Msg-Id`).
   */
  id: string;
  /** The payload bytes, fingerprinted: the same id with other bytes is a mismatch (`protocol.md K2`). */
  body: Uint8Array;
  /** The payload's content type; JSON payloads are compared canonically (reordered keys are the same message). */
  contentType?: string | null;
  /**
   * Which delivery this is, 1-based, as the broker counts it (JetStream's delivery count,
   * RabbitMQ's `x-delivery-count` or the adapter's retry header). Leave it out where the source
   * does not count (a Kinesis or DynamoDB stream): `maxAttempts` then counts in the key's row,
   * the takeovers of crashed attempts and thrown errors (`countFailure`), on every store,
   * protocol.md K23 and K46.
   * @default unknown (counted as delivery 1)
   */
  attempt?: number;
  /**
   * How many times the adapter gave this message back because its key was in progress elsewhere
   * (`idem/amqp`'s `x-idem-given-back`): not attempts, only the backoff of the next give-back
   * (`inProgressDelayMs`, protocol.md K18).
   * @default 0
   */
  givenBack?: number;
}

/** Why a message is acknowledged. */
export type AckReason =
  /** The handler ran and the key was finished in the same transaction as its last effects. */
  | 'processed'
  /** The key finished earlier (a redelivery or a publisher's retry): nothing ran. */
  | 'duplicate';

/** Why a message should come back later. Never an ack: the work is not known to be committed. */
export type RetryReason =
  /** Another consumer holds the key's lease (`protocol.md K7`). */
  | 'in-progress'
  /** The idempotency store failed; nothing is known to have committed. */
  | 'store-unavailable'
  /** Another consumer took the key over while this one worked (`protocol.md K8`). */
  | 'lease-lost'
  /** The handler threw; the lease was released with the recovery point kept (`protocol.md K10`). */
  | 'handler-failed';

/** Why a message should go to the dead-letter destination, never to be processed as it is. */
export type DeadLetterReason =
  /** The same message id arrived with another payload; the first one's work stands. */
  | 'mismatch'
  /** The handler failed on `maxAttempts` deliveries; the recovery point is kept. */
  | 'max-attempts'
  /** No key could be formed (an empty id, a key function that threw) or the body is not bytes. */
  | 'invalid-message';

/**
 * What the broker adapter must do with the message, returned by
 * {@link IdempotentConsumer.consume}. `ack` comes only after the commit.
 */
export type Disposition =
  | { action: 'ack'; reason: AckReason }
  /** Redeliver after `delayMs` ms (nack with a delay, or a delay queue). */
  | { action: 'retry'; reason: RetryReason; delayMs: number; error?: unknown }
  /** Reject for good: a dead-letter exchange / `term`. */
  | { action: 'dead-letter'; reason: DeadLetterReason; error?: unknown };

/** What the outbox relay publishes (defined beside the store that keeps the outbox rows). */
export type { OutgoingMessage, Publisher } from '../store/outbox-message.js';
