/**
 * The crash-suspect gate of one consumer (protocol.md K23 5): a readers-writer gate over the
 * deliveries this process has in flight. An ordinary delivery holds it as a reader, alongside
 * the others; a crash suspect (a redelivery whose key a dead worker left started, its lease
 * run out) holds it as the writer: it waits, without claiming, until the readers in flight
 * are done, deliveries that come after it wait behind it, and it runs alone. So a crash
 * counted at a takeover (protocol.md K23 1) is counted only against the messages that were in
 * flight with it, and once a poison message is isolated, only against the poison.
 *
 * Every hold is bounded by `boundMs` (the lease): a hold that lasts longer (a hung handler) no
 * longer blocks anyone, so the gate never stalls for good.
 */
export class CrashSuspectGate {
  private readonly holders = new Map<number, 'read' | 'write'>();
  /** Whether the writer holds the gate now (at most one does). */
  private writing = false;
  private readonly queue: Array<{ write: boolean; grant: () => void }> = [];
  private next = 0;

  constructor(private readonly boundMs: number) {}

  /** Waits for a reader's turn; resolves with its release. */
  read(): Promise<() => void> {
    return this.enter(false);
  }

  /** Waits for the readers in flight and the writers before it; resolves with its release. */
  write(): Promise<() => void> {
    return this.enter(true);
  }

  /** Holders right now (for tests and metrics). */
  get size(): number {
    return this.holders.size;
  }

  private enter(write: boolean): Promise<() => void> {
    return new Promise((resolve) => {
      this.queue.push({ write, grant: () => resolve(this.hold(write)) });
      this.pump();
    });
  }

  private hold(write: boolean): () => void {
    const id = this.next++;
    this.holders.set(id, write ? 'write' : 'read');
    if (write) this.writing = true;
    const end = () => {
      clearTimeout(timer);
      if (!this.holders.delete(id)) return;
      if (write) this.writing = false;
      this.pump();
    };
    // A hold past the bound (a hung handler) stops blocking the others; its release is then a no-op.
    const timer = setTimeout(end, this.boundMs);
    return end;
  }

  /** Grants the head of the queue while it fits: readers together, a writer alone, in arrival order. */
  private pump(): void {
    while (this.queue.length > 0) {
      const head = this.queue[0]!;
      if (this.writing || (head.write && this.holders.size > 0)) return;
      this.queue.shift();
      head.grant();
    }
  }
}
