import { InvalidOptionError } from '../core/errors.js';
import { DeliveryBatcher } from '../consumer/batcher.js';
import type { IdempotentConsumer, MessageEffects, MessageHandler } from '../consumer/consumer.js';
import type { ConsumedMessage, Disposition } from '../consumer/types.js';
import type { AmqpConfirmChannelLike, AmqpMessageLike, AmqpPublishOptions } from './types.js';

/** The header carrying how many deliveries came before a retried copy. */
export const ATTEMPT_HEADER = 'x-idem-attempt';
/** The header a dead-lettered copy carries: the disposition's reason. */
export const REASON_HEADER = 'x-idem-reason';
/** The header carrying how many times a message was given back because its key was in progress elsewhere (not attempts). */
export const GIVEN_BACK_HEADER = 'x-idem-given-back';

/** Options of {@link consumeAmqp}. */
export interface AmqpConsumeOptions<Tx = unknown> {
  /** A confirm channel (`await connection.createConfirmChannel()`); used for consuming and for retry/dead-letter copies. */
  channel: AmqpConfirmChannelLike;
  /** The queue to consume. It must exist. */
  queue: string;
  /** The broker-free consumer: store, scope, maxAttempts. */
  consumer: IdempotentConsumer<Tx>;
  /** The work for one message, through `ctx.phase` / `ctx.call` / `ctx.complete`. Exactly one of `handler` and `effects`. */
  handler?: MessageHandler<Tx>;
  /**
   * Instead of `handler`: the message's local effects alone, in the store's transaction. The
   * deliveries that arrive together (up to `prefetch`) are then applied and their keys
   * written finished in one transaction on a store that can batch (`IdempotentConsumer.consumeBatch`,
   * protocol.md K39), and acked after its commit.
   */
  effects?: MessageEffects<Tx>;
  /**
   * Unacknowledged messages in flight on this channel (`basic.qos`).
   * @default 16
   */
  prefetch?: number;
  /**
   * The queue that holds retried copies for their delay: declared by {@link consumeAmqp} with
   * `x-dead-letter-exchange: ''` and `x-dead-letter-routing-key: queue`, so a copy whose
   * per-message TTL ends goes back to `queue`.
   * @default `${queue}.idem-retry`
   */
  retryQueue?: string;
  /**
   * Where dead-lettered messages go, as a copy with the `x-idem-reason` header, published with
   * a confirm before the original is acked. Without it the original is rejected without
   * requeue, and the queue's own dead-letter exchange (if any) takes it.
   */
  deadLetter?: { exchange: string; routingKey: string };
  /**
   * The message id of a delivery.
   * @default the AMQP `message-id` property (a message without one is dead-lettered as invalid)
   */
  messageId?: (message: AmqpMessageLike) => string | undefined;
  /** Called with every delivery's disposition, for logs and metrics. Must not throw. */
  onDisposition?: (disposition: Disposition, message: ConsumedMessage) => void;
}

/** A running AMQP consumer. */
export interface AmqpConsumer {
  readonly consumerTag: string;
  /** Cancels the subscription and waits for the deliveries in flight to be settled. */
  stop(): Promise<void>;
}

/**
 * Consumes a RabbitMQ queue through an {@link IdempotentConsumer}: manual acks, `prefetch`
 * messages in flight, and each delivery's disposition carried out:
 * - `ack`: `basic.ack`, sent only after the key's finish committed;
 * - `retry`: a copy (same id, body, headers, plus `x-idem-attempt`) is published to the retry
 *   queue with the delay as its TTL and confirmed, then the original is acked; if the copy is
 *   not confirmed, nothing is acked and the broker redelivers the original. A duplicate whose
 *   key is in progress (reason `in-progress`, a short delay) is instead held unacked for its
 *   delay, then given back as a confirmed copy to the queue itself (its attempt not counted,
 *   `x-idem-given-back` raised) and the original acked: never a requeue, which a quorum queue
 *   counts toward its `x-delivery-limit`; other deliveries go on meanwhile;
 * - `dead-letter`: a copy to `deadLetter` (confirmed) then ack, or a reject without requeue.
 *
 * The delivery count comes from the `x-idem-attempt` header of retried copies plus the
 * broker's own count of redeliveries (`x-delivery-count` on quorum queues, else the
 * `redelivered` flag, which counts one).
 *
 * @example
 * ```ts
 * const channel = await (await amqplib.connect(url)).createConfirmChannel();
 * await channel.assertQueue('orders');
 * const running = await consumeAmqp({ channel, queue: 'orders', consumer, handler });
 * ```
 * @throws {InvalidOptionError} for a missing channel, queue, consumer or handler.
 */
export async function consumeAmqp<Tx>(options: AmqpConsumeOptions<Tx>): Promise<AmqpConsumer> {
  const { channel, queue, consumer, handler, effects } = options;
  if (
    !channel ||
    typeof channel.consume !== 'function' ||
    typeof queue !== 'string' ||
    !queue ||
    !consumer ||
    (typeof handler === 'function') === (typeof effects === 'function')
  ) {
    throw new InvalidOptionError('idem/amqp: consumeAmqp needs { channel, queue, consumer } and one of handler or effects');
  }
  const retryQueue = options.retryQueue ?? `${queue}.idem-retry`;
  await channel.assertQueue(retryQueue, {
    durable: true,
    arguments: { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': queue },
  });
  const prefetch = options.prefetch ?? 16;
  await channel.prefetch(prefetch);
  const messageIdOf = options.messageId ?? ((m: AmqpMessageLike) => m.properties.messageId);
  const inFlight = new Set<Promise<void>>();

  const settle = async (msg: AmqpMessageLike, message: ConsumedMessage, disposition: Disposition): Promise<void> => {
    try {
      options.onDisposition?.(disposition, message);
    } catch {
      // observers never change the outcome
    }
    const ch = channel;
    if (disposition.action === 'ack') {
      ch.ack(msg);
      return;
    }
    if (disposition.action === 'retry' && disposition.reason === 'in-progress') {
      // A duplicate in flight (protocol.md K18): held for its short delay, then given back to the
      // same queue as a confirmed copy and the original acked. Not a copy through the retry
      // queue, where a short TTL would wait behind the long ones at its head (RabbitMQ expires
      // per-message TTLs only there); not a requeue (`basic.nack`), which raises a quorum queue's
      // x-delivery-count and, past its x-delivery-limit, dead-letters a message that never
      // failed. The copy carries the deliveries that counted before this one: a give-back is
      // not an attempt (protocol.md K18, K46).
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, disposition.delayMs)));
      const headers = {
        ...copiedHeaders(msg),
        [ATTEMPT_HEADER]: Math.max(0, (message.attempt ?? 1) - 1),
        [GIVEN_BACK_HEADER]: (message.givenBack ?? 0) + 1,
      };
      try {
        await publishConfirmed(channel, '', queue, msg, { headers });
      } catch {
        ch.nack(msg, false, true); // the copy was not confirmed: requeue (counted by a quorum queue)
        return;
      }
      ch.ack(msg);
      return;
    }
    if (disposition.action === 'retry') {
      const headers = { ...copiedHeaders(msg), [ATTEMPT_HEADER]: message.attempt ?? 1 };
      await publishConfirmed(channel, '', retryQueue, msg, { headers, expiration: String(Math.max(0, Math.ceil(disposition.delayMs))) });
      ch.ack(msg);
      return;
    }
    if (options.deadLetter) {
      const headers = { ...(msg.properties.headers ?? {}), [REASON_HEADER]: disposition.reason };
      await publishConfirmed(channel, options.deadLetter.exchange, options.deadLetter.routingKey, msg, { headers });
      ch.ack(msg);
    } else {
      ch.nack(msg, false, false);
    }
  };

  const track = (p: Promise<void>) => {
    const q = p.catch(() => {
      // The copy was not confirmed or the channel closed: nothing was acked, so the broker
      // redelivers the original when the channel ends.
    });
    inFlight.add(q);
    void q.finally(() => inFlight.delete(q));
  };
  // With `effects`: deliveries go in batches (protocol.md K39), acked once their batch committed.
  const batcher = new DeliveryBatcher<AmqpMessageLike>(async (msgs) => {
    const messages = msgs.map((msg) => toConsumed(msg, messageIdOf(msg)));
    const dispositions = await consumer.consumeBatch(messages, effects!);
    await Promise.all(msgs.map((msg, i) => settle(msg, messages[i]!, dispositions[i]!).catch(() => undefined)));
  });

  const { consumerTag } = await channel.consume(
    queue,
    (msg: AmqpMessageLike | null) => {
      if (!msg) return; // the broker cancelled the consumer
      if (effects) return batcher.add(msg);
      const message = toConsumed(msg, messageIdOf(msg));
      track(consumer.consume(message, handler!).then((disposition) => settle(msg, message, disposition)));
    },
    { noAck: false },
  );
  return {
    consumerTag,
    async stop() {
      await channel.cancel(consumerTag).catch(() => undefined);
      await Promise.all([...inFlight, batcher.drained()]);
    },
  };
}

/** The broker-free view of a delivery: id, bytes, content type, and its attempt number. */
export function toConsumed(msg: AmqpMessageLike, id: string | undefined): ConsumedMessage {
  const headers = msg.properties.headers ?? {};
  const before = Number(headers[ATTEMPT_HEADER] ?? 0);
  const count = Number(headers['x-delivery-count']);
  const redeliveries = Number.isFinite(count) && count > 0 ? count : msg.fields.redelivered ? 1 : 0;
  const givenBack = Number(headers[GIVEN_BACK_HEADER] ?? 0);
  const consumed: ConsumedMessage = {
    id: id ?? '',
    body: msg.content,
    contentType: msg.properties.contentType ?? null,
    attempt: (Number.isFinite(before) ? before : 0) + redeliveries + 1,
  };
  if (Number.isFinite(givenBack) && givenBack > 0) consumed.givenBack = givenBack;
  return consumed;
}

/**
 * The headers a copy of `msg` carries: its own, without the broker's `x-delivery-count` (already
 * folded into `x-idem-attempt` by {@link toConsumed}; carried over, it would count twice).
 */
function copiedHeaders(msg: AmqpMessageLike): Record<string, unknown> {
  const { 'x-delivery-count': _counted, ...headers } = msg.properties.headers ?? {};
  return headers;
}

function publishConfirmed(
  channel: AmqpConfirmChannelLike,
  exchange: string,
  routingKey: string,
  msg: AmqpMessageLike,
  extra: AmqpPublishOptions,
): Promise<void> {
  const options: AmqpPublishOptions = { persistent: true, ...extra };
  if (msg.properties.messageId !== undefined) options.messageId = msg.properties.messageId;
  if (msg.properties.contentType !== undefined) options.contentType = msg.properties.contentType;
  return new Promise((resolve, reject) => {
    channel.publish(exchange, routingKey, msg.content, options, (err) => (err ? reject(err) : resolve()));
  });
}
