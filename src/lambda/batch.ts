/**
 * Lambda batches from SQS (standard and FIFO), Kinesis and DynamoDB streams, one record at a
 * time under the claim/phase/finish protocol (protocol.md K18, K35), answered with the partial
 * batch response (`batchItemFailures`, the event source mapping's `ReportBatchItemFailures`).
 */
import { dataKey } from '../core/data-key.js';
import { InvalidKeyError, InvalidOptionError } from '../core/errors.js';
import { IdempotentConsumer, type ConsumerOptions } from '../consumer/consumer.js';
import type { MessageContext } from '../consumer/context.js';
import type { Disposition } from '../consumer/types.js';
import type { EngineOptions, IdempotencyEngine } from '../engine/engine.js';
import {
  type BatchResponse,
  type DynamoDbEventLike,
  dynamoDbSource,
  InvalidEventError,
  type KinesisEventLike,
  kinesisSource,
  type RecordSource,
  type SqsEventLike,
  sqsSource,
} from './batch-events.js';
import { invocationLeaseMs, type LambdaContextLike } from './invocation.js';

/** Options of a batch handler: an engine (or a store and the engine's options) and the batch's own. */
export type BatchOptions<Rec, Tx = unknown> = ({ engine: IdempotencyEngine<Tx> } | EngineOptions<Tx>) & {
  /** The scope the records' keys live in: the queue or the stream, 1-255 characters. */
  scope: string;
  /**
   * The key of a record, e.g. a business id in the body: any non-empty string (`customer#Zoë`,
   * a composite key over 255 characters), mapped into the stored keys (protocol.md K47).
   * @default the message id (SQS) or the event id (Kinesis, DynamoDB)
   */
  getKey?: (record: Rec) => string;
  /**
   * Keeps a record whose key cannot be formed (`getKey` threw, or gave an empty string or a
   * non-string; protocol.md K47), e.g. in a dead-letter table or queue of your own. Awaited; the
   * record is then done, not named. If it throws, the record is named as a failed one. Without
   * it, an SQS message is named alone (the queue's redrive policy moves it to the dead-letter
   * queue; the rest of its FIFO group goes on) and a stream record is passed over (named, it
   * would hold its shard until the stream's retry settings let it go); `onRecord` sees it as
   * `dead-letter:invalid-message` with the `InvalidKeyError`.
   */
  onInvalidKey?: (record: Rec, error: InvalidKeyError) => void | Promise<void>;
  /**
   * Added to the invocation's remaining time for each record's lease (as the HTTP handler,
   * `withIdempotency`): the key stays exclusive while the invocation can still run.
   * @default 1000
   */
  leaseMarginMs?: number;
  /** See `ConsumerOptions.maxAttempts`: counted from SQS's ApproximateReceiveCount and the key's takeovers (protocol.md K23). */
  maxAttempts?: number;
  /** Called with each record's disposition (processed, duplicate, retry, …), for logs and metrics. Must not throw. */
  onRecord?: (record: Rec, disposition: Disposition) => void;
};

/** A record's handler: its effects in `ctx.phase` / `ctx.call` / `ctx.complete`. Throw to fail the record. */
export type RecordHandler<Rec, Tx = unknown, C extends LambdaContextLike = LambdaContextLike> = (
  record: Rec,
  ctx: MessageContext<Tx>,
  context: C,
) => Promise<unknown>;

/** A batch handler: assignable to aws-lambda's `SQSHandler`, `KinesisStreamHandler`, `DynamoDBStreamHandler`. */
export type BatchHandler<E, C extends LambdaContextLike = LambdaContextLike> = (event: E, context: C) => Promise<BatchResponse>;

/**
 * Builds a batch handler over `source`. Records run one after another, in the batch's order. A
 * record is reported failed (delivered again) unless its key finished: now, or earlier (a
 * redelivered batch skips the records already done, protocol.md K35). A failed record stops the
 * rest of its ordering group: the rest of a FIFO message group, the rest of a stream batch. A
 * record whose key cannot be formed is not a failed record: see `onInvalidKey` (protocol.md K47).
 */
function batchHandler<Rec, E extends { Records: Rec[] }, Tx, C extends LambdaContextLike>(
  source: RecordSource<Rec>,
  options: BatchOptions<Rec, Tx>,
  handler: RecordHandler<Rec, Tx, C>,
): BatchHandler<E, C> {
  if (!options) throw new InvalidOptionError('idem: a batch handler needs options { store, scope }');
  if (typeof handler !== 'function') throw new InvalidOptionError('idem: a batch handler needs a record handler');
  const { leaseMarginMs = 1000, getKey, onRecord, onInvalidKey, ...rest } = options;
  if (!(Number.isFinite(leaseMarginMs) && leaseMarginMs >= 0)) throw new InvalidOptionError('idem: leaseMarginMs must be a number of milliseconds >= 0');
  const keyOf = getKey ?? ((record: Rec) => source.key(record));
  const consumerOptions = rest as ConsumerOptions<Tx>;
  const observe = (record: Rec, disposition: Disposition) => {
    try {
      onRecord?.(record, disposition);
    } catch {
      // an observer never changes the outcome
    }
  };
  // One consumer (one engine) for the handler's life; validates the options at start-up.
  const consumer = new IdempotentConsumer<Tx>(consumerOptions);
  const fixedLease = 'engine' in consumerOptions || (consumerOptions as EngineOptions<Tx>).leaseMs !== undefined;
  return async function idempotentBatch(event, context) {
    const records = event?.Records ?? [];
    if (!Array.isArray(records)) throw new InvalidEventError('idem/lambda: a batch event needs its Records array');
    const failures: Array<{ itemIdentifier: string }> = [];
    const stopped = new Set<string>();
    for (const record of records) {
      // A malformed record fails alone (protocol.md K35): what cannot be read of it makes its
      // disposition, never an error of the whole batch.
      const group = readOr(() => source.group(record), undefined);
      const fail = () => {
        // A record with no readable identifier is named by an empty one: Lambda then retries
        // the whole batch, whose done records replay.
        failures.push({ itemIdentifier: readOr(() => source.itemIdentifier(record), '') });
        if (group !== undefined) stopped.add(group);
      };
      if (group !== undefined && stopped.has(group)) {
        fail();
        continue;
      }
      const remaining = fixedLease ? undefined : remainingMs(context);
      if (remaining !== undefined && remaining <= 0) {
        // No time left to run it: it goes back to Lambda unclaimed (protocol.md K26).
        fail();
        continue;
      }
      // protocol.md K26, K35: each record's lease covers what is left of the invocation (no
      // heartbeat, as the HTTP handler); a duplicate waits for a holder at most until then.
      const limits =
        remaining === undefined
          ? undefined
          : { leaseMs: invocationLeaseMs(remaining, leaseMarginMs), maxWaitMs: Math.max(0, Math.floor(remaining - leaseMarginMs)) };
      // protocol.md K47: a record whose key cannot be formed is poison for itself alone; it never
      // stops its group (it can never run, so nothing waits on it) and never holds a stream shard.
      let id: string;
      try {
        id = keyOf(record);
        dataKey(id);
      } catch (cause) {
        const error = cause instanceof InvalidKeyError ? cause : new InvalidKeyError('idem/lambda: getKey threw for this record', { cause });
        observe(record, { action: 'dead-letter', reason: 'invalid-message', error });
        if (onInvalidKey !== undefined) {
          try {
            await onInvalidKey(record, error);
          } catch {
            fail(); // not kept: named as a failed record, so it is not lost
          }
        } else if (source.redrives) {
          failures.push({ itemIdentifier: readOr(() => source.itemIdentifier(record), '') });
        }
        continue;
      }
      let disposition: Disposition;
      try {
        const { body, contentType } = source.payload(record);
        const message = { id, body, contentType, attempt: source.attempt(record) };
        disposition = await consumer.consume(message, (ctx) => handler(record, ctx, context), limits);
      } catch (error) {
        disposition = { action: 'dead-letter', reason: 'invalid-message', error };
      }
      observe(record, disposition);
      if (disposition.action === 'ack') continue;
      // Retry and dead-letter alike go back to Lambda: the queue's redrive policy (maxReceiveCount)
      // or the stream's retry settings decide when a record leaves for the dead-letter queue.
      fail();
    }
    return { batchItemFailures: failures };
  };
}

/** `read()`, or `fallback` when it throws (a field of a malformed record). */
function readOr<T>(read: () => T, fallback: T): T {
  try {
    return read();
  } catch {
    return fallback;
  }
}

/** The invocation's remaining time in ms, or `undefined` without a usable context. */
function remainingMs(context: LambdaContextLike | undefined): number | undefined {
  const remaining = typeof context?.getRemainingTimeInMillis === 'function' ? context.getRemainingTimeInMillis() : undefined;
  return remaining === undefined || !Number.isFinite(remaining) ? undefined : remaining;
}

/**
 * An SQS batch handler (standard or FIFO queue): each message's id is its key, its body its
 * fingerprint. On a FIFO queue a failed message stops the rest of its message group, as AWS
 * requires; other groups go on.
 *
 * @example
 * ```ts
 * export const handler: SQSHandler = sqsBatch<Queryable>({ store, scope: 'orders' }, async (record, ctx) => {
 *   const order = JSON.parse(record.body);
 *   await ctx.complete((tx) => insertOrder(tx, order));
 * });
 * ```
 * @throws {InvalidOptionError} at creation for bad options
 */
export function sqsBatch<Tx = unknown, E extends SqsEventLike = SqsEventLike, C extends LambdaContextLike = LambdaContextLike>(
  options: BatchOptions<E['Records'][number], Tx>,
  handler: RecordHandler<E['Records'][number], Tx, C>,
): BatchHandler<E, C> {
  return batchHandler<E['Records'][number], E, Tx, C>(sqsSource, options, handler);
}

/**
 * A Kinesis stream batch handler: each record's event id is its key, its data its fingerprint.
 * Records run in order; the first failure stops the batch, and the failed record and those
 * after it are reported by sequence number, so Lambda retries from it.
 * @throws {InvalidOptionError} at creation for bad options
 */
export function kinesisBatch<Tx = unknown, E extends KinesisEventLike = KinesisEventLike, C extends LambdaContextLike = LambdaContextLike>(
  options: BatchOptions<E['Records'][number], Tx>,
  handler: RecordHandler<E['Records'][number], Tx, C>,
): BatchHandler<E, C> {
  return batchHandler<E['Records'][number], E, Tx, C>(kinesisSource, options, handler);
}

/**
 * A DynamoDB stream batch handler: each record's event id is its key, its keys and images its
 * fingerprint. Ordered as {@link kinesisBatch}.
 * @throws {InvalidOptionError} at creation for bad options
 */
export function dynamoDbBatch<Tx = unknown, E extends DynamoDbEventLike = DynamoDbEventLike, C extends LambdaContextLike = LambdaContextLike>(
  options: BatchOptions<E['Records'][number], Tx>,
  handler: RecordHandler<E['Records'][number], Tx, C>,
): BatchHandler<E, C> {
  return batchHandler<E['Records'][number], E, Tx, C>(dynamoDbSource, options, handler);
}

/**
 * A Middy middleware running a batch handler: `middy().use(batchIdempotency(sqsBatch(options,
 * recordHandler)))`, after your parsers and loggers. It answers the partial batch response
 * from `before`, so Middy's own handler does not run.
 */
export function batchIdempotency<E, C extends LambdaContextLike>(
  batch: BatchHandler<E, C>,
): { before(request: { event: E; context: C }): Promise<BatchResponse> } {
  return { before: (request) => batch(request.event, request.context) };
}
