import { InvalidOptionError } from '../core/errors.js';
import { DeliveryBatcher } from '../consumer/batcher.js';
import type { IdempotentConsumer, MessageEffects, MessageHandler } from '../consumer/consumer.js';
import type { ConsumedMessage, Disposition, OutgoingMessage, Publisher } from '../consumer/types.js';
import type { JetStreamPublisherLike, JsMsgLike } from './types.js';

/** Options of {@link consumeJetStream}. */
export interface JetStreamConsumeOptions<Tx = unknown> {
  /** The messages of a JetStream consumer with explicit acks: `await consumer.consume()` (or `fetch()`). */
  messages: AsyncIterable<JsMsgLike>;
  /** The broker-free consumer: store, scope, maxAttempts. */
  consumer: IdempotentConsumer<Tx>;
  /** The work for one message, through `ctx.phase` / `ctx.call` / `ctx.complete`. Exactly one of `handler` and `effects`. */
  handler?: MessageHandler<Tx>;
  /**
   * Instead of `handler`: the message's local effects alone, in the store's transaction. The
   * messages that arrive together (up to `concurrency`) are then applied and their keys
   * written finished in one transaction on a store that can batch (`IdempotentConsumer.consumeBatch`,
   * protocol.md K39), and acked after its commit.
   */
  effects?: MessageEffects<Tx>;
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
  const { messages, consumer, handler, effects } = options;
  if (!messages || typeof messages[Symbol.asyncIterator] !== 'function' || !consumer || (typeof handler === 'function') === (typeof effects === 'function')) {
    throw new InvalidOptionError('idem/nats: consumeJetStream needs { messages, consumer } and one of handler or effects');
  }
  const concurrency = options.concurrency ?? 1;
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new InvalidOptionError('idem/nats: concurrency must be a positive integer');
  const messageIdOf = options.messageId ?? defaultMessageId;
  const inFlight = new Set<Promise<void>>();

  const toMessage = (msg: JsMsgLike): ConsumedMessage => ({
    id: messageIdOf(msg),
    body: msg.data,
    contentType: msg.headers?.get('Content-Type') || null,
    attempt: msg.info.deliveryCount,
  });
  /** Runs `work` while telling JetStream every third of `ack_wait` that `msgs` are being worked on. */
  const working = async <T>(msgs: JsMsgLike[], work: () => Promise<T>): Promise<T> => {
    const timer = options.ackWaitMs
      ? setInterval(
          () => {
            for (const msg of msgs) msg.working();
          },
          Math.max(1, Math.floor(options.ackWaitMs / 3)),
        )
      : undefined;
    try {
      return await work();
    } finally {
      if (timer) clearInterval(timer);
    }
  };
  const settle = (msg: JsMsgLike, message: ConsumedMessage, disposition: Disposition): void => {
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
  const one = async (msg: JsMsgLike): Promise<void> => {
    const message = toMessage(msg);
    settle(msg, message, await working([msg], () => consumer.consume(message, handler!)));
  };
  const many = async (msgs: JsMsgLike[]): Promise<void> => {
    const batch = msgs.map(toMessage);
    const dispositions = await working(msgs, () => consumer.consumeBatch(batch, effects!));
    msgs.forEach((msg, i) => {
      try {
        settle(msg, batch[i]!, dispositions[i]!);
      } catch {
        // The connection broke while settling: JetStream redelivers after ack_wait.
      }
    });
  };

  const track = (p: Promise<void>) => {
    const q = p.catch(() => {
      // The connection broke while settling: JetStream redelivers after ack_wait.
    });
    inFlight.add(q);
    void q.finally(() => inFlight.delete(q));
  };
  // With `effects`: messages go in batches (protocol.md K39), acked once their batch committed.
  const batcher = new DeliveryBatcher<JsMsgLike>(many);

  for await (const msg of messages) {
    if (effects) {
      batcher.add(msg);
      if (batcher.count >= concurrency) await batcher.next();
      continue;
    }
    track(one(msg));
    if (inFlight.size >= concurrency) await Promise.race(inFlight);
  }
  await Promise.all([...inFlight, batcher.drained()]);
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
