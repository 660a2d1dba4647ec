import { InvalidOptionError } from '../core/errors.js';
import type { IdempotentConsumer, MessageHandler } from '../consumer/consumer.js';
import type { ConsumedMessage, Disposition, OutgoingMessage, Publisher } from '../consumer/types.js';
import type { JetStreamPublisherLike, JsMsgLike } from './types.js';

/** Options of {@link consumeJetStream}. */
export interface JetStreamConsumeOptions<Tx = unknown> {
  /** The messages of a JetStream consumer with explicit acks: `await consumer.consume()` (or `fetch()`). */
  messages: AsyncIterable<JsMsgLike>;
  /** The broker-free consumer: store, scope, maxAttempts. */
  consumer: IdempotentConsumer<Tx>;
  /** The work for one message. */
  handler: MessageHandler<Tx>;
  /**
   * Messages handled at once.
   * @default 1
   */
  concurrency?: number;
  /**
   * The JetStream consumer's `ack_wait` in ms. While a handler runs, `working()` is sent every
   * third of it, so JetStream does not redeliver a message whose lease is alive. Without it,
   * set `ack_wait` above idem's `leaseMs`: a redelivery inside the lease only meets
   * `in-progress` and is nak'ed with the lease's remaining time.
   */
  ackWaitMs?: number;
  /**
   * The message id of a delivery.
   * @default the `Nats-Msg-Id` header, else `<stream>:<stream sequence>` (stable across redeliveries)
   */
  messageId?: (message: JsMsgLike) => string;
  /**
   * Send the dead-letter reason with `term` (`+TERM <reason>`, shown in JetStream's
   * terminated-message advisory). Needs nats-server 2.10.4 or later: older servers ignore a
   * `+TERM` with a reason, and the message would be redelivered after `ack_wait`.
   * @default false
   */
  termReason?: boolean;
  /** Called with every delivery's disposition, for logs and metrics. Must not throw. */
  onDisposition?: (disposition: Disposition, message: ConsumedMessage) => void;
}

/**
 * Consumes JetStream messages through an {@link IdempotentConsumer} and carries out each
 * disposition: `ack` (after the key's finish committed), `nak(delayMs)` for a retry, `term(reason)`
 * for a dead letter. The attempt number is JetStream's delivery count. Resolves when `messages`
 * ends (after `messages.stop()`), once the deliveries in flight are settled.
 *
 * @example
 * ```ts
 * const js = jetstream(await connect({ servers }));
 * const messages = await (await js.consumers.get('ORDERS', 'billing')).consume();
 * void consumeJetStream({ messages, consumer, handler, ackWaitMs: 30_000 });
 * ```
 * @throws {InvalidOptionError} for missing messages, consumer or handler.
 */
export async function consumeJetStream<Tx>(options: JetStreamConsumeOptions<Tx>): Promise<void> {
  const { messages, consumer, handler } = options;
  if (!messages || typeof messages[Symbol.asyncIterator] !== 'function' || !consumer || typeof handler !== 'function') {
    throw new InvalidOptionError('idem/nats: consumeJetStream needs { messages, consumer, handler }');
  }
  const concurrency = options.concurrency ?? 1;
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new InvalidOptionError('idem/nats: concurrency must be a positive integer');
  const messageIdOf = options.messageId ?? defaultMessageId;
  const inFlight = new Set<Promise<void>>();

  const settle = async (msg: JsMsgLike): Promise<void> => {
    const message: ConsumedMessage = {
      id: messageIdOf(msg),
      body: msg.data,
      contentType: msg.headers?.get('Content-Type') || null,
      attempt: msg.info.deliveryCount,
    };
    const working = options.ackWaitMs ? setInterval(() => msg.working(), Math.max(1, Math.floor(options.ackWaitMs / 3))) : undefined;
    let disposition: Disposition;
    try {
      disposition = await consumer.consume(message, handler);
    } finally {
      if (working) clearInterval(working);
    }
    try {
      options.onDisposition?.(disposition, message);
    } catch {
      // observers never change the outcome
    }
    if (disposition.action === 'ack') msg.ack();
    else if (disposition.action === 'retry') msg.nak(Math.max(0, Math.ceil(disposition.delayMs)));
    else if (options.termReason) msg.term(`idem: ${disposition.reason}`);
    else msg.term();
  };

  for await (const msg of messages) {
    const p = settle(msg).catch(() => {
      // The connection broke while settling: JetStream redelivers after ack_wait.
    });
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
    if (inFlight.size >= concurrency) await Promise.race(inFlight);
  }
  await Promise.all([...inFlight]);
}

function defaultMessageId(msg: JsMsgLike): string {
  return msg.headers?.get('Nats-Msg-Id') || `${msg.info.stream}:${msg.info.streamSequence}`;
}

/**
 * A {@link Publisher} on JetStream: publishes to the message's destination subject with its id
 * as `Nats-Msg-Id`, so JetStream drops a repeat inside the stream's duplicate window, and
 * resolves on the stream's ack. For `OutboxRelay` (idem/postgres).
 */
export function jetStreamPublisher(js: JetStreamPublisherLike): Publisher {
  return async (message: OutgoingMessage) => {
    await js.publish(message.destination, message.body, { msgID: message.id });
  };
}
