/**
 * Gathers deliveries into batches for `IdempotentConsumer.consumeBatch` (protocol.md K39): at
 * most `maxRunning` batches run at once, and the deliveries that arrive meanwhile wait for the
 * next one, so a batch grows with the load (a broker refilling one prefetch slot per ack would
 * otherwise make batches of one). Used by the broker adapters (`idem/amqp`, `idem/nats`).
 */
export class DeliveryBatcher<M> {
  private pending: M[] = [];
  private running = 0;
  private scheduled = false;
  /** Deliveries gathered or in a running batch. */
  count = 0;
  private waiters: Array<() => void> = [];

  constructor(
    /** Settles one batch; never rejects (its deliveries are then left to the broker). */
    private readonly run: (batch: M[]) => Promise<void>,
    private readonly maxRunning = 2,
  ) {}

  add(delivery: M): void {
    this.pending.push(delivery);
    this.count++;
    this.schedule();
  }

  /** Resolves when a batch has ended (or at once when nothing is gathered or running). */
  next(): Promise<void> {
    if (this.count === 0) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Resolves once every delivery added so far is settled. */
  async drained(): Promise<void> {
    while (this.count > 0) await this.next();
  }

  /** The next batch leaves in the next turn of the event loop, so what arrives in this one joins it. */
  private schedule(): void {
    if (this.scheduled || this.running >= this.maxRunning || this.pending.length === 0) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (this.running >= this.maxRunning || this.pending.length === 0) return;
      const batch = this.pending;
      this.pending = [];
      this.running++;
      void this.run(batch)
        .catch(() => undefined)
        .finally(() => {
          this.running--;
          this.count -= batch.length;
          const waiters = this.waiters;
          this.waiters = [];
          for (const wake of waiters) wake();
          this.schedule();
        });
    });
  }
}
