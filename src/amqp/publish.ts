import type { OutgoingMessage, Publisher } from '../consumer/types.js';
import type { AmqpConfirmChannelLike, AmqpPublishOptions } from './types.js';

/**
 * A {@link Publisher} on a RabbitMQ confirm channel: publishes to `exchange` with the message's
 * destination as routing key, its id as `message-id`, persistent, and resolves on the broker's
 * confirm (rejects on a nack or a closed channel). For `OutboxRelay` (idem/postgres).
 *
 * @param options.exchange the exchange; `''` (the default exchange) routes to the queue named by the destination.
 */
export function amqpPublisher(channel: AmqpConfirmChannelLike, options: { exchange?: string } = {}): Publisher {
  const exchange = options.exchange ?? '';
  return (message: OutgoingMessage) =>
    new Promise<void>((resolve, reject) => {
      const publish: AmqpPublishOptions = { messageId: message.id, persistent: true };
      if (message.contentType) publish.contentType = message.contentType;
      try {
        channel.publish(exchange, message.destination, Buffer.from(message.body), publish, (err) => (err ? reject(err) : resolve()));
      } catch (error) {
        reject(error);
      }
    });
}
