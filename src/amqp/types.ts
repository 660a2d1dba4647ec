/**
 * The slice of amqplib's API that idem/amqp uses, declared locally: amqplib is an optional
 * peer dependency and is never imported. An amqplib `ConfirmChannel` fits these shapes.
 */

/** Publish options idem sets (amqplib `Options.Publish`). */
export interface AmqpPublishOptions {
  messageId?: string;
  contentType?: string;
  headers?: Record<string, unknown>;
  persistent?: boolean;
  /** Per-message TTL in ms, as a decimal string. */
  expiration?: string;
}

/** A delivered message (amqplib `ConsumeMessage`). */
export interface AmqpMessageLike {
  content: Uint8Array;
  fields: { deliveryTag: number; redelivered: boolean };
  properties: { messageId?: string | undefined; contentType?: string | undefined; headers?: Record<string, unknown> | undefined };
}

/** A confirm channel (amqplib `ConfirmChannel`): publishes are confirmed by the broker. */
export interface AmqpConfirmChannelLike {
  consume(queue: string, onMessage: (msg: AmqpMessageLike | null) => void, options?: { noAck?: boolean }): Promise<{ consumerTag: string }>;
  cancel(consumerTag: string): Promise<unknown>;
  ack(message: AmqpMessageLike, allUpTo?: boolean): void;
  nack(message: AmqpMessageLike, allUpTo?: boolean, requeue?: boolean): void;
  prefetch(count: number, global?: boolean): Promise<unknown>;
  assertQueue(queue: string, options?: { durable?: boolean; arguments?: Record<string, unknown> }): Promise<unknown>;
  publish(exchange: string, routingKey: string, content: Uint8Array, options?: AmqpPublishOptions, callback?: (err: unknown) => void): boolean;
}
