/**
 * The recent share of replays among a store's claims: the switch between reading first and
 * claiming first of the PostgreSQL store (docs/protocol.md K3) and of the Redis store's
 * `replayFastPath: 'adaptive'` (K28). A read first pays for itself while retries of finished
 * keys are frequent, and is a round trip wasted on every new key otherwise. An exponentially weighted share (weight 1/16: a
 * switch of workload is followed within about a dozen claims). Each claim adds what it found,
 * whichever way it was answered (a claim returns a finished key too), so a
 * skipped fast path is taken again as soon as retries come back. Only the cost depends on it:
 * both ways decide the same.
 */

/** Weight of the newest claim in the share. */
const WEIGHT = 1 / 16;

export class ReplayShare {
  /** Starts at 0: a fresh store sends new keys (the common case) straight to the claim script. */
  private share = 0;

  /** Records whether a claim found a finished key (a replay, or a fingerprint mismatch). */
  add(replay: boolean): void {
    this.share += ((replay ? 1 : 0) - this.share) * WEIGHT;
  }

  /** True while at least half of the recent claims were replays: read first. */
  frequent(): boolean {
    return this.share >= 0.5;
  }
}
