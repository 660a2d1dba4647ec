import { ChangeMessageVisibilityCommand, DeleteMessageCommand, ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { InvalidOptionError } from '../core/errors.js';
import type { IdempotentConsumer, MessageHandler } from '../consumer/consumer.js';
import type { ConsumedMessage, Disposition } from '../consumer/types.js';
import type { Execution } from '../engine/execution.js';
import type { SqsClientLike, SqsMessageAttributeLike, SqsMessageLike } from './types.js';

/** The message attribute a dead-lettered copy carries: the disposition's reason (`mismatch`, `max-attempts`, `invalid-message`). */
export const IDEM_REASON_ATTRIBUTE = 'idem-reason';

/** SQS's longest visibility timeout, in seconds (12 hours). */
const MAX_VISIBILITY_S = 43_200;
/** SQS's most messages per `ReceiveMessage`. */
const MAX_PER_RECEIVE = 10;

/** Options of {@link SqsConsumer}. */
export interface SqsConsumeOptions<Tx = unknown> {
  /** An `SQSClient` from `@aws-sdk/client-sqs` (v3). */
  client: SqsClientLike;
  /** The queue's URL. A URL ending in `.fifo` is a FIFO queue: its message groups run one message at a time, in order. */
  queueUrl: string;
  /** The broker-free consumer: store, scope, maxAttempts. */
  consumer: IdempotentConsumer<Tx>;
  /** The work for one message, through `ctx.phase` / `ctx.call` / `ctx.complete`. */
  handler: MessageHandler<Tx>;
  /**
   * The visibility timeout this consumer asks for on every `ReceiveMessage`, in whole seconds
   * (1-43 200). The key's lease derives from it and stays shorter (protocol.md K56 1).
   * @default 30
   */
  visibilityTimeoutSec?: number;
  /**
   * The key's lease in ms, shorter than the visibility timeout: a message redelivered after a
   * crash then finds the dead worker's lease run out and is taken over at once.
   * @default two thirds of the visibility timeout
   * @throws {InvalidOptionError} at construction when it is not shorter than the visibility timeout.
   */
  leaseMs?: number;
  /**
   * How often, in ms, a message being worked on has its visibility and its key's lease extended
   * together (`ChangeMessageVisibility`, then the lease; protocol.md K56 2). Stops after the
   * engine's `maxExecutionMs`, so a hung handler cannot hold a message forever.
   * @default a third of `leaseMs`
   */
  heartbeatMs?: number;
  /**
   * Messages handled at once (received and not yet settled).
   * @default 10
   */
  concurrency?: number;
  /**
   * Long-poll time of each `ReceiveMessage`, in seconds (0-20). {@link SqsConsumer.stop} waits
   * for the poll under way, so this bounds how long a stop waits before the in-flight messages.
   * @default 20
   */
  waitTimeSeconds?: number;
  /**
   * The queue dead-lettered messages are sent to, with the `idem-reason` attribute, before the
   * original is deleted (protocol.md K56 3): at once, whatever the source queue's redrive
   * policy says. Without it, a dead letter is made visible again (`ChangeMessageVisibility` 0)
   * and left to the source queue's redrive policy, which must then exist with
   * `maxReceiveCount` ≤ `maxAttempts` (a queue without one would redeliver it until retention).
   */
  deadLetterQueueUrl?: string;
  /**
   * The idempotency key source of a message: a function, or `{ attribute }` for a string
   * message attribute the producer sets (a message without it is dead-lettered as invalid).
   * `MessageDeduplicationId` plays no part: it is SQS's own 5-minute window, not idem's key.
   * @default the SQS `MessageId` (stable across redeliveries of one send, new on a producer's resend)
   */
  messageId?: ((message: SqsMessageLike) => string | undefined) | { attribute: string };
  /** Called with every message's disposition, for logs and metrics. Must not throw. */
  onDisposition?: (disposition: Disposition, message: ConsumedMessage) => void;
  /** Called when an SQS call fails (a receive, a delete, a visibility change); the loop goes on. Must not throw. */
  onError?: (error: unknown, operation: 'receive' | 'delete' | 'change-visibility' | 'dead-letter') => void;
}

/** One received message while this consumer holds it. */
interface Held {
  msg: SqsMessageLike;
  message: ConsumedMessage;
  group: string | undefined;
}

/**
 * An SQS consumer outside Lambda (protocol.md K56): a long-poll loop that hands each message to
 * an {@link IdempotentConsumer} and carries out its disposition:
 * - `ack`: `DeleteMessage`, sent only after the key's finish committed;
 * - `retry`: `ChangeMessageVisibility` to the retry delay (rounded up to whole seconds), so the
 *   message comes back with `ApproximateReceiveCount` one higher: the attempt number that
 *   `maxAttempts` counts. A duplicate whose key another consumer holds (reason `in-progress`) is
 *   instead kept here, its visibility extended, and consumed again after its short delay: a
 *   give-back that is no receive, so it never counts toward `maxAttempts` (K18);
 * - `dead-letter`: a copy to `deadLetterQueueUrl` with the `idem-reason` attribute, then
 *   `DeleteMessage`; without that queue, the source queue's redrive policy.
 *
 * The lease is shorter than the visibility timeout, and the heartbeat extends both together, the
 * visibility first. On a FIFO queue the messages of one group run one at a time in the order
 * received; when one is retried, the group's later messages already received are made visible
 * again behind it, so the order holds. {@link stop} ends the polling and waits for the messages
 * in flight.
 *
 * @example
 * ```ts
 * const sqs = new SQSClient({});
 * const running = new SqsConsumer({ client: sqs, queueUrl, consumer, handler, deadLetterQueueUrl }).start();
 * process.on('SIGTERM', () => void running.stop());
 * ```
 */
export class SqsConsumer<Tx = unknown> {
  readonly queueUrl: string;
  /** The visibility timeout asked for on each receive, in seconds. */
  readonly visibilityTimeoutSec: number;
  /** The key's lease of each message, in ms (shorter than the visibility timeout). */
  readonly leaseMs: number;
  readonly heartbeatMs: number;
  private readonly options: SqsConsumeOptions<Tx>;
  private readonly client: SqsClientLike;
  private readonly consumer: IdempotentConsumer<Tx>;
  private readonly concurrency: number;
  private readonly waitTimeSeconds: number;
  private readonly fifo: boolean;
  private readonly idOf: (message: SqsMessageLike) => string | undefined;
  /** Messages received and not yet settled. */
  private held = 0;
  private readonly slots: Array<() => void> = [];
  /** FIFO: the messages of each group waiting here, the first of them running. */
  private readonly groups = new Map<string, Held[]>();
  private readonly inFlight = new Set<Promise<void>>();
  private stopping = false;
  private wake: (() => void) | undefined;
  private loop: Promise<void> | undefined;

  /** @throws {InvalidOptionError} for a missing client, queue, consumer or handler, out-of-range numbers, or a lease not shorter than the visibility timeout. */
  constructor(options: SqsConsumeOptions<Tx>) {
    if (!options || typeof options.client?.send !== 'function' || typeof options.queueUrl !== 'string' || !options.queueUrl || !options.consumer) {
      throw new InvalidOptionError('idem/sqs: SqsConsumer needs { client, queueUrl, consumer, handler }');
    }
    if (typeof options.handler !== 'function') throw new InvalidOptionError('idem/sqs: handler must be a function');
    this.options = options;
    this.client = options.client;
    this.consumer = options.consumer;
    this.queueUrl = options.queueUrl;
    this.fifo = options.queueUrl.endsWith('.fifo');
    this.visibilityTimeoutSec = options.visibilityTimeoutSec ?? 30;
    if (!Number.isInteger(this.visibilityTimeoutSec) || this.visibilityTimeoutSec < 1 || this.visibilityTimeoutSec > MAX_VISIBILITY_S) {
      throw new InvalidOptionError('idem/sqs: visibilityTimeoutSec must be a whole number of seconds from 1 to 43200');
    }
    const visibilityMs = this.visibilityTimeoutSec * 1000;
    // protocol.md K56 1: the lease ends before the message can be redelivered, so a redelivery
    // after a crash never meets a live lease of the dead worker.
    this.leaseMs = options.leaseMs ?? Math.floor((visibilityMs * 2) / 3);
    if (!(Number.isFinite(this.leaseMs) && this.leaseMs >= 1)) throw new InvalidOptionError('idem/sqs: leaseMs must be a positive number of ms');
    if (this.leaseMs >= visibilityMs) {
      throw new InvalidOptionError(
        `idem/sqs: leaseMs (${this.leaseMs}) must be shorter than the visibility timeout (${visibilityMs} ms): a redelivery would meet the dead worker's live lease`,
      );
    }
    if (this.leaseMs >= this.consumer.engine.retentionMs) throw new InvalidOptionError("idem/sqs: leaseMs must be shorter than the engine's retentionMs");
    this.heartbeatMs = options.heartbeatMs ?? Math.max(1, Math.floor(this.leaseMs / 3));
    if (!(Number.isFinite(this.heartbeatMs) && this.heartbeatMs >= 1 && this.heartbeatMs < this.leaseMs)) {
      throw new InvalidOptionError('idem/sqs: heartbeatMs must be a positive number of ms shorter than leaseMs');
    }
    this.concurrency = options.concurrency ?? 10;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) throw new InvalidOptionError('idem/sqs: concurrency must be a positive integer');
    this.waitTimeSeconds = options.waitTimeSeconds ?? 20;
    if (!Number.isInteger(this.waitTimeSeconds) || this.waitTimeSeconds < 0 || this.waitTimeSeconds > 20) {
      throw new InvalidOptionError('idem/sqs: waitTimeSeconds must be a whole number of seconds from 0 to 20');
    }
    const id = options.messageId;
    if (id !== undefined && typeof id !== 'function' && !(typeof id === 'object' && typeof id.attribute === 'string' && id.attribute)) {
      throw new InvalidOptionError('idem/sqs: messageId must be a function or { attribute: name }');
    }
    this.idOf = typeof id === 'function' ? id : id ? (m) => m.MessageAttributes?.[id.attribute]?.StringValue : (m) => m.MessageId;
  }

  /** Starts the long-poll loop (once); returns this consumer. */
  start(): this {
    this.loop ??= this.poll();
    return this;
  }

  /**
   * Stops polling and resolves once every message in flight is settled: the poll under way
   * finishes (at most `waitTimeSeconds`) and what it returned is made visible again unworked;
   * the messages being worked on are finished and deleted, or retried, as usual.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    for (const slot of this.slots.splice(0)) slot();
    await this.loop;
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
  }

  private async poll(): Promise<void> {
    while (!this.stopping) {
      if (this.held >= this.concurrency) {
        await new Promise<void>((resolve) => this.slots.push(resolve));
        continue;
      }
      let messages: SqsMessageLike[];
      try {
        const out = (await this.client.send(
          new ReceiveMessageCommand({
            QueueUrl: this.queueUrl,
            MaxNumberOfMessages: Math.min(MAX_PER_RECEIVE, this.concurrency - this.held),
            WaitTimeSeconds: this.waitTimeSeconds,
            VisibilityTimeout: this.visibilityTimeoutSec,
            MessageSystemAttributeNames: ['All'],
            MessageAttributeNames: ['All'],
          }),
        )) as { Messages?: SqsMessageLike[] };
        messages = out.Messages ?? [];
      } catch (error) {
        this.report(error, 'receive');
        await this.pause(1000);
        continue;
      }
      if (this.stopping) {
        // Received after stop() began: back to the queue unworked (counted one receive by SQS).
        await Promise.all(messages.map((msg) => this.changeVisibility(msg, 0)));
        break;
      }
      for (const msg of messages) this.dispatch(msg);
    }
  }

  /** A pause that stop() cuts short. */
  private pause(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    }).finally(() => {
      this.wake = undefined;
    });
  }

  private dispatch(msg: SqsMessageLike): void {
    this.held++;
    const held: Held = { msg, message: this.toConsumed(msg), group: this.fifo ? msg.Attributes?.MessageGroupId : undefined };
    if (held.group === undefined) {
      this.track(this.process(held));
      return;
    }
    // protocol.md K56 4: one message of a FIFO group at a time, in the order received.
    const queue = this.groups.get(held.group);
    if (queue) {
      queue.push(held);
      return;
    }
    this.groups.set(held.group, [held]);
    this.track(this.runGroup(held.group));
  }

  private async runGroup(group: string): Promise<void> {
    const queue = this.groups.get(group)!;
    while (queue.length > 0) {
      const disposition = await this.process(queue[0]!);
      queue.shift();
      if (disposition?.action === 'retry') {
        // The group's later messages must not overtake the retried one: visible again now, they
        // come back behind it (a FIFO group delivers nothing while one of its messages is in flight).
        const rest = queue.splice(0);
        await Promise.all(rest.map((h) => this.changeVisibility(h.msg, 0).finally(() => this.release())));
      }
    }
    this.groups.delete(group);
  }

  private track(p: Promise<unknown>): void {
    const q = p.then(
      () => undefined,
      () => undefined,
    );
    this.inFlight.add(q);
    void q.finally(() => this.inFlight.delete(q));
  }

  private release(): void {
    this.held--;
    this.slots.shift()?.();
  }

  /** Consumes one message with its visibility and lease kept alive, then settles it. */
  private async process(held: Held): Promise<Disposition | undefined> {
    const { msg, message } = held;
    const keeper = new Keeper(this, msg);
    let disposition: Disposition;
    try {
      const handler = this.options.handler;
      const run: MessageHandler<Tx> = async (ctx) => {
        keeper.execution = ctx.execution;
        try {
          return await handler(ctx);
        } finally {
          keeper.execution = undefined;
        }
      };
      let givenBack = 0;
      for (;;) {
        let delayMs: number;
        // The lease is this call's own (protocol.md K26): the engine's heartbeat is off for it,
        // and the keeper extends it together with the message's visibility (K56 2).
        disposition = await this.consumer.consume(givenBack > 0 ? { ...message, givenBack } : message, run, { leaseMs: this.leaseMs });
        if (disposition.action !== 'retry' || disposition.reason !== 'in-progress' || this.stopping) break;
        delayMs = disposition.delayMs;
        // protocol.md K18: another consumer holds the key; kept here (no receive, so not an
        // attempt) and consumed again after the short delay, the visibility extended meanwhile.
        await new Promise((resolve) => setTimeout(resolve, Math.max(1, delayMs)));
        givenBack++;
      }
    } catch {
      disposition = { action: 'retry', reason: 'store-unavailable', delayMs: 1000 };
    } finally {
      await keeper.stop();
    }
    try {
      this.options.onDisposition?.(disposition, message);
    } catch {
      // observers never change the outcome
    }
    try {
      await this.settle(msg, disposition);
    } finally {
      this.release();
    }
    return disposition;
  }

  private async settle(msg: SqsMessageLike, disposition: Disposition): Promise<void> {
    if (disposition.action === 'ack') return this.delete(msg);
    if (disposition.action === 'retry') {
      await this.changeVisibility(msg, Math.ceil(Math.max(0, disposition.delayMs) / 1000));
      return;
    }
    const dlq = this.options.deadLetterQueueUrl;
    if (!dlq) {
      // The source queue's redrive policy moves it once its receive count passes maxReceiveCount.
      await this.changeVisibility(msg, 0);
      return;
    }
    try {
      await this.client.send(new SendMessageCommand(deadLetterCopy(dlq, msg, disposition.reason)));
    } catch (error) {
      // Not copied: nothing deleted; the message comes back after its visibility timeout.
      this.report(error, 'dead-letter');
      return;
    }
    await this.delete(msg);
  }

  private async delete(msg: SqsMessageLike): Promise<void> {
    try {
      await this.client.send(new DeleteMessageCommand({ QueueUrl: this.queueUrl, ReceiptHandle: msg.ReceiptHandle }));
    } catch (error) {
      // The message comes back after its visibility timeout and is acked as a duplicate.
      this.report(error, 'delete');
    }
  }

  /** @internal `ChangeMessageVisibility`; false when SQS refused it (the message is no longer this receipt's). */
  async changeVisibility(msg: SqsMessageLike, seconds: number): Promise<boolean> {
    try {
      await this.client.send(
        new ChangeMessageVisibilityCommand({
          QueueUrl: this.queueUrl,
          ReceiptHandle: msg.ReceiptHandle,
          VisibilityTimeout: Math.min(MAX_VISIBILITY_S, seconds),
        }),
      );
      return true;
    } catch (error) {
      this.report(error, 'change-visibility');
      return false;
    }
  }

  private report(error: unknown, operation: 'receive' | 'delete' | 'change-visibility' | 'dead-letter'): void {
    try {
      this.options.onError?.(error, operation);
    } catch {
      // observers never change the outcome
    }
  }

  private toConsumed(msg: SqsMessageLike): ConsumedMessage {
    let id: string | undefined;
    try {
      id = this.idOf(msg);
    } catch {
      id = undefined; // dead-lettered as invalid by the consumer
    }
    const count = Number(msg.Attributes?.ApproximateReceiveCount);
    const consumed: ConsumedMessage = {
      id: typeof id === 'string' ? id : '',
      body: new TextEncoder().encode(msg.Body ?? ''),
      contentType: stringAttribute(msg.MessageAttributes?.['content-type']) ?? null,
    };
    // protocol.md K56 3: SQS's receive count is the attempt number maxAttempts counts.
    if (Number.isInteger(count) && count >= 1) consumed.attempt = count;
    return consumed;
  }

  /** @internal the engine's bound on a heartbeat (`maxExecutionMs`). */
  get maxExecutionMs(): number {
    return this.consumer.engine.maxExecutionMs;
  }
}

/** What a {@link Keeper} needs of its consumer. */
interface KeeperOwner {
  readonly visibilityTimeoutSec: number;
  readonly heartbeatMs: number;
  readonly maxExecutionMs: number;
  changeVisibility(msg: SqsMessageLike, seconds: number): Promise<boolean>;
}

/**
 * The heartbeat of one message (protocol.md K56 2): every `heartbeatMs`, the visibility is
 * extended to the full timeout and then, if SQS took it, the key's lease. The lease is never
 * extended for a message SQS no longer holds for this receipt (its visibility lapsed, it may be
 * with another consumer): that lease runs out and the redelivery takes the key over.
 */
class Keeper {
  execution: Pick<Execution<unknown>, 'status' | 'extendLease'> | undefined;
  private readonly timer: ReturnType<typeof setInterval>;
  private tick: Promise<void> = Promise.resolve();

  constructor(
    private readonly owner: KeeperOwner,
    private readonly msg: SqsMessageLike,
  ) {
    const stopAt = performance.now() + owner.maxExecutionMs;
    this.timer = setInterval(() => {
      if (performance.now() >= stopAt) {
        clearInterval(this.timer); // a hung handler: both run out, the message is redelivered
        return;
      }
      this.tick = this.tick.then(() => this.beat());
    }, owner.heartbeatMs);
    this.timer.unref?.();
  }

  private async beat(): Promise<void> {
    const extended = await this.owner.changeVisibility(this.msg, this.owner.visibilityTimeoutSec);
    const execution = this.execution;
    if (!extended || !execution || execution.status !== 'open') return;
    // LeaseLostError: the execution is closed and its signal aborted; the handler sees it.
    await execution.extendLease().catch(() => undefined);
  }

  /** Stops the heartbeat and waits for a beat under way, so it cannot undo the settlement's visibility change. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.tick;
  }
}

/** The `SendMessage` input of a dead-lettered copy: same body and attributes, plus the reason; on a FIFO queue the same group. */
function deadLetterCopy(queueUrl: string, msg: SqsMessageLike, reason: string): { QueueUrl: string; MessageBody: string; [more: string]: unknown } {
  const attributes: Record<string, SqsMessageAttributeLike> = {};
  for (const [name, value] of Object.entries(msg.MessageAttributes ?? {})) {
    if (value?.DataType) attributes[name] = { DataType: value.DataType, StringValue: value.StringValue, BinaryValue: value.BinaryValue };
  }
  attributes[IDEM_REASON_ATTRIBUTE] = { DataType: 'String', StringValue: reason };
  const input: { QueueUrl: string; MessageBody: string; [more: string]: unknown } = {
    QueueUrl: queueUrl,
    MessageBody: msg.Body ?? '',
    MessageAttributes: attributes,
  };
  if (queueUrl.endsWith('.fifo')) {
    input.MessageGroupId = msg.Attributes?.MessageGroupId ?? 'idem-dead-letter';
    // One copy per received message, whatever the producer's deduplication id was.
    input.MessageDeduplicationId = msg.MessageId ?? msg.Attributes?.MessageDeduplicationId;
  }
  return input;
}

function stringAttribute(attribute: SqsMessageAttributeLike | undefined): string | undefined {
  return typeof attribute?.StringValue === 'string' ? attribute.StringValue : undefined;
}

/** Creates an {@link SqsConsumer} and starts it. @throws {InvalidOptionError} as its constructor. */
export function consumeSqs<Tx>(options: SqsConsumeOptions<Tx>): SqsConsumer<Tx> {
  return new SqsConsumer(options).start();
}
