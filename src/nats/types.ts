/**
 * The slice of the `@nats-io/jetstream` API that idem/nats uses, declared locally: the NATS
 * client is an optional peer dependency and is never imported. A `JsMsg` and a `JetStreamClient`
 * fit these shapes.
 */

/** A JetStream message (`JsMsg`). */
export interface JsMsgLike {
  data: Uint8Array;
  subject: string;
  headers?: { get(name: string): string } | undefined;
  info: { stream: string; streamSequence: number; deliveryCount: number };
  ack(): void;
  nak(millis?: number): void;
  term(reason?: string): void;
  working(): void;
}

/** The publishing side of a JetStream client (`JetStreamClient`). */
export interface JetStreamPublisherLike {
  publish(subject: string, payload?: Uint8Array, options?: { msgID?: string }): Promise<{ duplicate: boolean; seq: number }>;
}
