/**
 * The Redis server's clock as a bound, for the replay fast path (store.ts): a `TIME` reply
 * and this process's monotonic clock (`performance.now()`) around it give, at any later
 * moment, a time the server's clock has not yet passed. Judging retention by that upper
 * bound never replays a key past its retention and never reports more retention left than
 * the server would (protocol.md K6, K20): near the end of a retention the fast path merely
 * steps aside and the claim script decides by the server's own `TIME` (docs/protocol.md K28).
 *
 * A sample is taken again once it is a second old, riding along with a read that is sent
 * anyway (one `TIME` per second of traffic instead of one per request). The bound's slack is
 * the sample's round trip, and the monotonic clock drifts from the server's by parts per
 * million over that second. A server clock stepped forward (an NTP step, a failover to a
 * node whose clock runs ahead) is seen at the next sample, within that second.
 */
import { performance } from 'node:perf_hooks';

/** How long one `TIME` sample is used, in ms. */
const SAMPLE_MS = 1000;

export class ServerClock {
  /** Server epoch ms (with its µs) read by the last sample, and `performance.now()` when it was sent. */
  private serverMs = 0;
  private sentAt = Number.NEGATIVE_INFINITY;
  private pending: Promise<void> | undefined;

  /** True when no sample is younger than a second (and none is under way). */
  stale(): boolean {
    return this.pending === undefined && performance.now() - this.sentAt >= SAMPLE_MS;
  }

  /** Sends `TIME` through `send`; settles when the sample is recorded (a failed one is not). */
  sample(send: (args: string[]) => Promise<unknown>): Promise<void> {
    const sentAt = performance.now();
    const pending = send(['TIME']).then(
      (reply) => {
        const [seconds, micros] = reply as [string, string];
        // Its µs kept: rounded down to the ms, the bound could be up to 1 ms below the server's
        // clock when the round trip is shorter than that (protocol.md K28).
        this.serverMs = Number(seconds) * 1000 + Number(micros) / 1000;
        this.sentAt = sentAt;
      },
      () => undefined,
    );
    this.pending = pending.finally(() => {
      this.pending = undefined;
    });
    return this.pending;
  }

  /**
   * The latest the server's clock can read now (epoch ms): the sample's reading plus the
   * time elapsed here since it was SENT. Infinity without a sample younger than two seconds
   * (nothing is judged fresh).
   */
  latestNowMs(): number {
    // No sample, or one too old to use (the fast path was off for a while: a request meanwhile
    // waits for no fresh sample, and a clock stepped since must not count): Infinity, so the
    // claim script decides by the server's own TIME until a new sample is in.
    if (performance.now() - this.sentAt > 2 * SAMPLE_MS) return Number.POSITIVE_INFINITY;
    return this.serverMs + (performance.now() - this.sentAt);
  }
}
