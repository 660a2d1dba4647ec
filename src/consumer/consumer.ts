import { fingerprint } from '../core/fingerprint.js';
import { dataKey } from '../core/data-key.js';
import { InvalidKeyError, InvalidOptionError, InvalidScopeError } from '../core/errors.js';
import type { AttemptPolicy } from '../engine/attempt.js';
import { type BatchItemEnd, canBatch } from '../engine/batch.js';
import { type EngineOptions, IdempotencyEngine, type RunOutcome } from '../engine/engine.js';
import { MessageContext, resultResponse } from './context.js';
import { CrashSuspectGate } from './gate.js';
import type { ConsumedMessage, Disposition } from './types.js';

/** A message handler: runs the work through the context's phases and calls. */
export type MessageHandler<Tx = unknown> = (ctx: MessageContext<Tx>) => Promise<unknown>;

/**
 * A message's local effects and nothing else, in the transaction the store gives (e.g. one
 * INSERT): what {@link IdempotentConsumer.consumeBatch} applies to several messages in one
 * transaction. Its JSON result is stored with the key, as `ctx.complete` stores it. It may run
 * more than once in this process (a batch that rolled back is applied again key by key), so
 * it must have no effect outside the transaction.
 */
export type MessageEffects<Tx = unknown> = (tx: Tx, message: ConsumedMessage) => Promise<unknown>;

/** Options of {@link IdempotentConsumer}: an engine (or a store and the engine's options) and the consumer's own. */
export type ConsumerOptions<Tx = unknown> = ({ engine: IdempotencyEngine<Tx> } | EngineOptions<Tx>) & {
  /** The scope keys live in: the queue or the consumer group, 1-255 characters. */
  scope: string;
  /**
   * The key of a message: any non-empty string, mapped into the stored keys (protocol.md K47).
   * @default the message id
   */
  key?: (message: ConsumedMessage) => string;
  /**
   * The delivery on which a failing handler is given up: the message is dead-lettered
   * instead of retried. Counted from the broker's delivery count ({@link ConsumedMessage.attempt}).
   * @default 5
   */
  maxAttempts?: number;
  /**
   * Delay in ms before a failed delivery is retried, by attempt (1-based).
   * @default 1000 × 2^(attempt − 1), at most 60 000
   */
  retryDelayMs?: number | ((attempt: number) => number);
  /**
   * A duplicate delivery whose key another consumer is working on (`protocol.md K18`): with a
   * store that can wake waiters (`subscribe`, e.g. `PostgresStore` with `notify: true`) it waits
   * for the result (at most the lease) and is acked as a duplicate once the first copy finished;
   * with any other store it goes back to the broker after this delay in ms, by attempt (1-based),
   * never past the lease's end. Either way the consumer's other deliveries go on.
   * @default 100 × 2^(attempt − 1), at most 5 000
   */
  inProgressDelayMs?: number | ((attempt: number) => number);
  /**
   * At most how long, in ms, a duplicate waits for the holder's result (see `inProgressDelayMs`),
   * e.g. less than the time a Lambda invocation has left.
   * @default the lease
   */
  waitMs?: number;
  /**
   * Runs a crash suspect alone (protocol.md K23 5): a redelivery whose key a dead worker left
   * `started` with its lease run out waits, unclaimed, until this consumer's other deliveries
   * in flight are done, and the deliveries after it wait for it (each wait at most the lease).
   * So when a poison message kills the process, its neighbours in flight (prefetch or
   * concurrency > 1) are counted one crash and then succeed alone, and only the poison reaches
   * `maxAttempts`. A no-op with one delivery in flight at a time; it costs a read of the key on
   * every redelivery. `false`: suspects run with the others, and every message in flight on a
   * process that dies is counted a crash.
   * @default true
   */
  isolateCrashSuspects?: boolean;
};

const DEFAULT_MAX_ATTEMPTS = 5;

/**
 * Exactly-once effects for an at-least-once consumer (`protocol.md K18`), with no broker in it: each message's id
 * is an idempotency key in `scope`, claimed with the payload's fingerprint (`protocol.md K3`);
 * the handler's effects commit in atomic phases (`K4`) and the key finishes in the same
 * transaction as the last of them (`K5`). {@link consume} says what to do with the message;
 * a broker adapter (`idem/amqp`, `idem/nats`) does it.
 *
 * - `ack` only after the finish committed, or for a key finished earlier (a duplicate);
 * - `retry` when another consumer holds the lease, the store failed, the lease was lost or
 *   the handler threw (the lease is released, the recovery point kept: `K10`);
 * - `dead-letter` for the same id with another payload (never processed twice), an invalid
 *   id, or a handler that failed on `maxAttempts` deliveries.
 *
 * @example
 * ```ts
 * const consumer = new IdempotentConsumer({ store, scope: 'orders' });
 * const disposition = await consumer.consume({ id, body, attempt }, async (ctx) => {
 *   const invoice = await ctx.phase('invoice', (tx) => insertInvoice(tx, order));
 *   await ctx.call('charge', (key) => psp.charge(invoice, key));
 *   await ctx.complete((tx) => outbox.enqueue(tx, event));
 * });
 * ```
 */
export class IdempotentConsumer<Tx = unknown> {
  readonly engine: IdempotencyEngine<Tx>;
  readonly scope: string;
  readonly maxAttempts: number;
  private readonly keyOf: (message: ConsumedMessage) => string;
  private readonly retryDelay: (attempt: number) => number;
  private readonly inProgressDelay: (attempt: number) => number;
  private readonly waitMs: number;
  /** The attempt policy of a message whose source counts no deliveries (the store counts). */
  private readonly policy: AttemptPolicy<Tx>;
  /** protocol.md K23 5: crash suspects run alone; `undefined` when `isolateCrashSuspects` is off. */
  private readonly gate: CrashSuspectGate | undefined;
  /** The keys this consumer has in flight, with their deliveries: a key held here is no dead worker's. */
  private readonly holding = new Map<string, number>();

  /** @throws {InvalidOptionError} for a missing store or scope, or out-of-range numbers. */
  constructor(options: ConsumerOptions<Tx>) {
    if (!options) throw new InvalidOptionError('idem: IdempotentConsumer needs options { store, scope }');
    this.engine = 'engine' in options ? options.engine : new IdempotencyEngine(options);
    if (typeof options.scope !== 'string' || options.scope.length === 0 || options.scope.length > 255) {
      throw new InvalidOptionError('idem: `scope` (the queue or consumer group) must be a string of 1-255 characters');
    }
    this.scope = options.scope;
    this.maxAttempts = options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
    if (!Number.isInteger(this.maxAttempts) || this.maxAttempts < 1) {
      throw new InvalidOptionError('idem: maxAttempts must be a positive integer');
    }
    this.policy = { maxAttempts: this.maxAttempts };
    this.keyOf = options.key ?? ((m) => m.id);
    const delay = options.retryDelayMs;
    if (typeof delay === 'number' && !(delay >= 0)) throw new InvalidOptionError('idem: retryDelayMs must be >= 0');
    this.retryDelay = typeof delay === 'function' ? delay : typeof delay === 'number' ? () => delay : (n) => Math.min(60_000, 1000 * 2 ** Math.max(0, n - 1));
    this.waitMs = options.waitMs ?? this.engine.leaseMs;
    if (!(this.waitMs >= 0)) throw new InvalidOptionError('idem: waitMs must be >= 0');
    const inProgress = options.inProgressDelayMs;
    if (typeof inProgress === 'number' && !(inProgress >= 0)) throw new InvalidOptionError('idem: inProgressDelayMs must be >= 0');
    this.inProgressDelay =
      typeof inProgress === 'function' ? inProgress : typeof inProgress === 'number' ? () => inProgress : (n) => Math.min(5000, 100 * 2 ** Math.max(0, n - 1));
    this.gate = options.isolateCrashSuspects === false ? undefined : new CrashSuspectGate(this.engine.leaseMs);
  }

  /**
   * Processes one delivery of a message at most once in effect, and says what to do with it.
   * Never throws for a store failure or a handler's error: those are dispositions.
   *
   * @param handler the work; its effects belong in `ctx.phase` / `ctx.call` / `ctx.complete`.
   * @param limits this delivery's own bounds: `leaseMs`, its lease with no heartbeat (protocol.md
   *   K26, e.g. a Lambda invocation's remaining time plus a margin), and `maxWaitMs`, at most how
   *   long a duplicate waits for the holder.
   * @returns the disposition the broker adapter carries out (ack, retry with a delay, dead-letter).
   */
  async consume(message: ConsumedMessage, handler: MessageHandler<Tx>, limits?: { leaseMs?: number; maxWaitMs?: number }): Promise<Disposition> {
    let key: string;
    let print: Uint8Array;
    try {
      if (!message || !(message.body instanceof Uint8Array)) throw new TypeError('idem: a message needs its body as bytes');
      key = dataKey(this.keyOf(message)); // any string, mapped into the stored keys (protocol.md K47)
      print = fingerprint({ method: 'MESSAGE', path: this.scope, contentType: message.contentType ?? null, body: message.body });
    } catch (error) {
      return { action: 'dead-letter', reason: 'invalid-message', error };
    }
    const attempt = message.attempt ?? 1;
    // A source that counts deliveries (a broker) gives the attempt; one that does not (a Kinesis
    // or DynamoDB stream) leaves `attempt` out, and the key's own count in the store is the only one.
    const policy: AttemptPolicy<Tx> = message.attempt !== undefined ? { maxAttempts: this.maxAttempts, deliveries: attempt } : this.policy;
    let end: RunOutcome;
    const leave = await this.enterGate(key, attempt);
    try {
      // protocol.md K18: a duplicate in flight waits for the result where the store can wake
      // it (the engine asks `subscribe`, so a store gaining it later waits too), else comes back soon.
      // The attempt itself never throws: its failures are ends (protocol.md K46).
      end = await this.engine.run(
        { scope: this.scope, key, fingerprint: print, waitMs: this.waitMs, leaseMs: limits?.leaseMs, maxWaitMs: limits?.maxWaitMs },
        policy,
        async (execution) => {
          await handler(new MessageContext<Tx>(message, execution));
          return resultResponse(undefined);
        },
      );
    } catch (error) {
      if (error instanceof InvalidKeyError || error instanceof InvalidScopeError) {
        return { action: 'dead-letter', reason: 'invalid-message', error };
      }
      // protocol.md H17 for messages: fail closed, the message comes back.
      return { action: 'retry', reason: 'store-unavailable', delayMs: this.retryDelay(attempt), error };
    } finally {
      leave();
    }
    return this.disposition(end, attempt, message.givenBack ?? 0);
  }

  /**
   * protocol.md K23 5: a crash suspect (a redelivery whose key is `started` with its lease run
   * out: its worker died holding it, or released it after a throw, which `get` cannot tell
   * apart) enters as the writer and runs alone; any other delivery as a reader. A failed read
   * enters as a reader: the claim then fails closed as usual.
   */
  private async enterGate(key: string, attempt: number): Promise<() => void> {
    if (!this.gate) return () => undefined;
    let suspect = false;
    // A key in flight on this consumer is not a dead worker's (e.g. a handler here that outlived its lease).
    if (attempt > 1 && !this.holding.has(key)) {
      try {
        const record = await this.engine.store.get(this.scope, key, this.engine.retentionMs);
        suspect = record?.state === 'started' && record.leaseExpired;
      } catch {
        // the store is unreachable: the claim that follows fails closed
      }
    }
    this.holding.set(key, (this.holding.get(key) ?? 0) + 1);
    const release = await (suspect ? this.gate.write() : this.gate.read());
    return () => {
      release();
      const n = (this.holding.get(key) ?? 1) - 1;
      if (n > 0) this.holding.set(key, n);
      else this.holding.delete(key);
    };
  }

  /**
   * Processes deliveries that arrived together, each at most once in effect, with effects that
   * need only the store's transaction (protocol.md K39): on a store that can batch
   * (`PostgresStore` on a plain table without `notify`), the new keys' effects are
   * applied and their rows written finished in ONE transaction, one commit for the batch; a key
   * that exists is decided as a claim would (`K3`: a finished key is acked as a duplicate, a
   * fingerprint mismatch dead-lettered). Everything else (a key in progress or abandoned, the
   * same key twice, a batch that failed and rolled back, a store that cannot batch) goes
   * through {@link consume} with `ctx.complete(effects)`, which retries, counts attempts and
   * dead-letters as usual. Never throws.
   *
   * @returns one disposition per message, in order.
   */
  async consumeBatch(messages: readonly ConsumedMessage[], effects: MessageEffects<Tx>): Promise<Disposition[]> {
    const alone = (message: ConsumedMessage) => this.consume(message, (ctx) => ctx.complete((tx) => effects(tx, ctx.message)));
    if (!canBatch(this.engine.store)) return Promise.all(messages.map(alone));
    const dispositions: Array<Disposition | undefined> = messages.map(() => undefined);
    const items: Array<{ key: string; fingerprint: Uint8Array }> = [];
    const at: number[] = [];
    const keys = new Set<string>();
    for (let i = 0; i < messages.length; i++) {
      const message = messages[i]!;
      try {
        if (!message || !(message.body instanceof Uint8Array)) continue; // dead-lettered on its own path
        const key = dataKey(this.keyOf(message));
        if (keys.has(key)) continue; // the second copy waits for the first: on its own path, after the batch
        keys.add(key);
        items.push({ key, fingerprint: fingerprint({ method: 'MESSAGE', path: this.scope, contentType: message.contentType ?? null, body: message.body }) });
        at.push(i);
      } catch {
        // an invalid id or payload: dead-lettered on its own path
      }
    }
    let outcomes: BatchItemEnd[] | undefined;
    if (items.length > 0) {
      try {
        outcomes = await this.engine.commitBatch(this.scope, items, async (tx, j) => resultResponse(await effects(tx, messages[at[j]!]!)));
      } catch {
        // Rolled back, nothing committed: every message goes its own way below.
      }
    }
    outcomes?.forEach((outcome, j) => {
      if (outcome?.kind === 'done') dispositions[at[j]!] = { action: 'ack', reason: 'processed' };
      else if (outcome?.kind === 'replay') dispositions[at[j]!] = { action: 'ack', reason: 'duplicate' };
      else if (outcome?.kind === 'mismatch') dispositions[at[j]!] = { action: 'dead-letter', reason: 'mismatch' };
    });
    return Promise.all(messages.map((message, i) => dispositions[i] ?? alone(message)));
  }

  /** How the engine's attempt ended (protocol.md K46), as a disposition. */
  private disposition(end: RunOutcome, attempt: number, givenBack = 0): Disposition {
    switch (end.kind) {
      case 'replay':
        return { action: 'ack', reason: 'duplicate' };
      case 'mismatch':
        return { action: 'dead-letter', reason: 'mismatch' };
      case 'in-progress':
        // The holder acks its own delivery; this one comes back soon (the holder is likely done
        // by then), never later than the lease's end (a crashed holder is then taken over).
        // Its backoff grows with the give-backs too, which an adapter may not count as attempts (K18).
        return { action: 'retry', reason: 'in-progress', delayMs: Math.max(1, Math.min(end.retryAfterMs, this.inProgressDelay(attempt + givenBack))) };
      case 'done':
        return { action: 'ack', reason: 'processed' };
      case 'failed-permanently':
        // protocol.md K23: nothing is stored for a message; the dead-letter queue keeps it, and a
        // fresh publish of the id (attempt 1: a re-drive) gets one more run.
        return end.error === undefined
          ? { action: 'dead-letter', reason: 'max-attempts' }
          : { action: 'dead-letter', reason: 'max-attempts', error: end.error };
      case 'lease-lost':
        return end.error === undefined
          ? { action: 'retry', reason: 'lease-lost', delayMs: this.retryDelay(1) }
          : { action: 'retry', reason: 'lease-lost', delayMs: this.retryDelay(1), error: end.error };
      case 'failed':
        return { action: 'retry', reason: 'handler-failed', delayMs: this.retryDelay(attempt), error: end.error };
      case 'store-unavailable':
        // The finish failed: a store outage never fails a message for good (protocol.md K5).
        return { action: 'retry', reason: 'handler-failed', delayMs: this.retryDelay(attempt), error: end.error };
      case 'released':
        // The handler ended the execution some other way (release, discard): nothing is finished.
        return { action: 'retry', reason: 'handler-failed', delayMs: this.retryDelay(attempt) };
    }
  }
}
